"""A drain whose budget slot cannot be renewed for longer than a holder TTL, where the eviction's refused case left two
of its class: at its cordon, the renewal before it refused (the stack's binding to the budget's Role gone: 403); in
its eviction, the renewal failing (the API server failing the budget ConfigMap's reads: 500). Its holder expires a TTL
after its last renewal, and another node is granted the slot: counted as drain time, the drain's timeout ended its
node's action (the instance terminated undrained) beside that node's drain, over the budget of one (invariants 1, 9).
From its slot's certain expiry on it waits for a slot as any waiter does, its wait not drain time, up to the latest
its timeout policy may act before the action's global timeout (invariant 2). On the sandbox API server, through the
product's adapters and the CORDON and EVICT steps (see test_budget_renewal_refused_mid_drain.py)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from kubernetes.client import RbacAuthorizationV1Api

from nodecycle.domain.drain.common import _deadline_cap
from nodecycle.domain.drain.cordon import CORDON_REFUSED
from nodecycle.domain.drain.evict import UNRENEWED
from nodecycle.domain.engine import DRAIN_RETRY_CAP_SECONDS, Outcome
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import Step
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE, admin_api, core_api, node_name
from tests.integration.budget.recreation import at_its_cordon, cordon_step, six_nodes, slot_of
from tests.integration.budget.test_budget_renewal_refused_mid_drain import GLOBAL_AT, TIMEOUT_AT
from tests.integration.budget.test_configmap_recreated import budget_of, request
from tests.support.budget_refusals import as_stored, kept_drain
from tests.unit.drain.test_drain_steps import policy

EVERY = policy().poll_seconds


def test_a_cordon_refused_its_renewal_past_its_slot_s_expiry_waits_for_a_slot_beside_the_node_granted_it(
    server: KubeServer,
) -> None:
    # Given a budget of 1 granted to stack blue's drain of node 0, at its cordon
    api = core_api(server)
    clock, _, blue = six_nodes(server, api, total="1")
    slot = slot_of(0)
    assert blue.acquire(slot).granted
    record = at_its_cordon(slot).model_copy(update={"global_deadline": GLOBAL_AT})
    # When blue's binding to the budget's Role is deleted (a GitOps prune of one stack's RBAC), stack green's kept
    RbacAuthorizationV1Api(server.api_client()).delete_namespaced_role_binding("nodecycle-budget", NAMESPACE)
    green = budget_of(admin_api(server), clock, "green", "1", "1")
    # ...and blue's cordon is run as the engine runs it, green's node 1 asking at each of its tries
    refused_at: datetime | None = None
    granted_at: datetime | None = None
    outcome: Outcome | None = None
    drain_deadline: datetime | None = None
    while outcome is None or (outcome.again and clock.now() <= GLOBAL_AT):
        clock.advance(EVERY if outcome is None else max(1.0, outcome.delay))
        outcome = cordon_step(api, blue, clock=clock)(record, clock.now())
        record = as_stored(record, outcome)
        if refused_at is None and CORDON_REFUSED in record.extra:
            refused_at = clock.now()
            drain_deadline = datetime.fromisoformat(str(record.extra[CORDON_REFUSED])) + policy().timeout
        if granted_at is None and green.acquire(request(1, owner="green")).granted:
            granted_at = clock.now()

    # Then green's node was granted the slot once blue's holder expired, before blue's drain timeout
    assert refused_at is not None
    assert granted_at is not None
    assert drain_deadline is not None
    assert granted_at < drain_deadline
    assert [h.node for h in green.snapshot().holders] == [node_name(1)]
    # And blue's cordon did not end its node's action at its drain timeout beside node 1's drain: it waited for a
    # slot, and ended at the latest its timeout policy may act before the global timeout, its node never cordoned
    assert (outcome.then, outcome.changes.get("outcome")) == (Step.COMPLETE, "drain-timeout-cordon-refused")
    cap = _deadline_cap(record, policy())
    assert drain_deadline + timedelta(minutes=5) < cap <= clock.now() <= cap + timedelta(seconds=EVERY)
    stored = server.get_object("nodes", node_name(0))
    assert stored is not None
    assert not stored["spec"].get("unschedulable")


@pytest.mark.parametrize("target", ["GET configmaps", "GET nodes"])
def test_a_drain_whose_renewal_fails_past_its_slot_s_expiry_does_not_end_beside_the_node_granted_its_slot(
    server: KubeServer, target: str
) -> None:
    # Given a budget of 1 held by stack blue's drain of node 0 (claimed), whose pod a PodDisruptionBudget keeps
    drain = kept_drain(server, global_deadline=GLOBAL_AT)
    clock = drain.clock
    green = budget_of(admin_api(server), clock, "green", "1", "1")
    failing_at: datetime | None = None
    granted_at: datetime | None = None
    evictions_then = 0

    def polled(until: datetime, fail: bool = True) -> Outcome:
        """Blue's polls as the engine runs them (a failure retried at the drain steps' cap), the API server failing
        every read of the ConfigMap (or of the node, which comes before the renewal) at each (``fail``); green's
        node 1 asking between them."""
        nonlocal failing_at, granted_at, evictions_then
        outcome = None
        while outcome is None or (outcome.again and clock.now() < until):
            clock.advance(EVERY if outcome is None else max(1.0, outcome.delay))
            if fail:
                server.faults.arm([Fault("etcd", "kube-error", target)], seed=1)
            try:
                outcome = drain.poll()
            except TransientError:
                failing_at = failing_at or clock.now()
                evictions_then = evictions_then or drain.evictions()
                outcome = Outcome.wait(DRAIN_RETRY_CAP_SECONDS, attempts=drain.record.attempts + 1)
            else:
                outcome = Outcome(**{**outcome.__dict__, "changes": {"attempts": 0, **outcome.changes}})
            finally:
                server.faults.disarm()
            drain.stored(outcome)
            if granted_at is None and green.acquire(request(1, owner="green")).granted:
                granted_at = clock.now()
        return outcome

    assert polled(clock.now() + timedelta(seconds=EVERY), fail=False).again
    # When the API server fails every read of the budget ConfigMap (or of the node, read before it) at blue's polls,
    # until past blue's drain timeout
    outcome = polled(TIMEOUT_AT + timedelta(seconds=2 * EVERY))

    # Then green's node was granted the slot once blue's holder expired, before blue's drain timeout
    assert failing_at is not None
    assert granted_at is not None
    assert granted_at < TIMEOUT_AT
    assert [h.node for h in green.snapshot().holders] == [node_name(1)]
    # And blue's drain, its slot certainly expired a holder TTL after its renewals began to fail, does not end its
    # node's action at its drain timeout beside node 1's: paused from then on, a wait for a slot (invariant 9)
    assert outcome.again, outcome
    assert drain.record.drain_paused_at is not None
    noted = datetime.fromisoformat(str(drain.record.extra[UNRENEWED]))
    assert failing_at < noted <= failing_at + timedelta(seconds=DRAIN_RETRY_CAP_SECONDS)
    assert drain.record.drain_paused_at == noted + policy().holder_ttl
    # And, the budget failing to the end, it ends at the latest its timeout policy may act, having evicted nothing
    # since its renewals failed
    outcome = polled(GLOBAL_AT)
    assert outcome.changes.get("outcome") == "drain-timeout-unlisted"
    assert clock.now() <= GLOBAL_AT
    assert drain.evictions() == evictions_then
    assert server.get_object("pods", "web-0", "default") is not None
