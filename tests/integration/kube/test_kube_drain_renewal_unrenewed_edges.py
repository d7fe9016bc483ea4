"""A drain whose budget slot is not renewed for longer than a holder TTL where the rule that makes that a wait for a slot
(not drain time) did not reach: the eviction of the pods left bound to the name of a node deleted (``kubectl delete
node``), its renewal failing; and a renewal whose write the API server answers with a 5xx at every try, applied (the
answer lost) or not (a webhook on ConfigMaps down, failurePolicy Fail). Another node is granted the slot a holder TTL
after its last renewal that landed: the drain must not end its node's action at its own drain timeout beside that
node's drain (invariants 1, 9), nor hold a slot it keeps renewing past its timeout, force grace and margin (10). On the
sandbox API server, through the product's adapters and the EVICT step (see
tests/integration/budget/test_budget_renewal_unrenewed_at_cordon_and_failing.py)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest

from nodecycle.domain.drain.evict import FORCED_POD_SLACK, UNRENEWED
from nodecycle.domain.engine import DRAIN_RETRY_CAP_SECONDS, Outcome
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import act_as_drain, admin_api, core_api, node_name
from tests.integration.budget.recreation import (
    BEGAN,
    evict_step,
    in_progress,
    lifecycle_of,
    six_nodes,
    slot_of,
)
from tests.integration.budget.test_budget_renewal_refused_mid_drain import GLOBAL_AT
from tests.integration.budget.test_configmap_recreated import budget_of, request
from tests.support.budget_refusals import keep_a_pod_on
from tests.unit.drain.test_drain_steps import policy

EVERY = policy().poll_seconds
# The drain's deadline: a holder TTL and more after its renewals begin to fail (its slot granted to green before it),
# sooner than the budget tests' half hour, for fewer polls
TIMEOUT_AT = BEGAN + timedelta(minutes=13)


@pytest.fixture
def server() -> Iterator[KubeServer]:
    """The budget tests' API server: nodes added by each test, deploy/rbac.yaml applied, the drain role's entry. The
    pods of a deleted node stay bound to its name for the test's hours on the budget's clock, as they do while the
    pod garbage collector lags (kube-controller-manager on the same failing etcd), not its 40 s."""
    with KubeServer(tls=True, pod_gc_quarantine_seconds=3600.0) as started:
        act_as_drain(started)
        yield started


class _Drain:
    """Stack blue's drain of node 0 at its eviction (its slot held, its node claimed, its pod kept by a
    PodDisruptionBudget), polled as the engine polls it, with stack green's node 1 asking for the budget of 1
    between its polls."""

    def __init__(self, server: KubeServer) -> None:
        self.server = server
        self.api = core_api(server)
        self.clock, records, self.blue = six_nodes(server, self.api, total="1")
        self.slot = slot_of(0)
        in_progress(self.api, self.blue, records, self.slot)
        self.admin = admin_api(server)
        keep_a_pod_on(server, node_name(0))
        self.green = budget_of(self.admin, self.clock, "green", "1", "1")
        self.record = lifecycle_of(self.slot, Step.EVICT, seq=3).model_copy(
            update={"global_deadline": GLOBAL_AT, "drain_deadline": TIMEOUT_AT}
        )
        self.failing_at: datetime | None = None
        self.evicted_when_failing: int | None = None  # the evictions made when the step first failed
        self.granted_at: datetime | None = None

    def evictions(self) -> int:
        return self.server.counters().get(("create", "pods/eviction"), 0)

    def polled(self, until: datetime, faults: list[Fault] | None = None) -> Outcome:
        """Blue's polls until ``until`` or its step's end (a failure retried at the drain steps' cap), ``faults``
        armed at each."""
        outcome = None
        while outcome is None or (outcome.again and self.clock.now() < until):
            self.clock.advance(EVERY if outcome is None else max(1.0, outcome.delay))
            if faults:
                self.server.faults.arm(faults, seed=1)
            try:
                outcome = evict_step(self.api, self.blue, self.slot)(self.record, self.clock.now())
            except TransientError:
                self.failing_at = self.failing_at or self.clock.now()
                if self.evicted_when_failing is None:
                    self.evicted_when_failing = self.evictions()
                outcome = Outcome.wait(DRAIN_RETRY_CAP_SECONDS, attempts=self.record.attempts + 1)
            else:
                outcome = Outcome(**{**outcome.__dict__, "changes": {"attempts": 0, **outcome.changes}})
            finally:
                self.server.faults.disarm()
            self.record = self.record.model_copy(
                update={k: v for k, v in outcome.changes.items() if k in LifecycleRecord.model_fields}
            )
            if self.granted_at is None and self.green.acquire(request(1, owner="green")).granted:
                self.granted_at = self.clock.now()
        return outcome

    def green_holds_the_slot_before(self, deadline: datetime) -> None:
        assert self.granted_at is not None
        assert self.granted_at < deadline
        assert [h.node for h in self.green.snapshot().holders] == [node_name(1)]


def test_the_pods_of_a_deleted_node_whose_renewal_fails_past_its_expiry_do_not_end_beside_the_node_granted_it(
    server: KubeServer,
) -> None:
    # Given blue's drain of node 0 at its eviction, polled once
    drain = _Drain(server)
    assert drain.polled(drain.clock.now() + timedelta(seconds=EVERY)).again
    # When node 0's object is deleted (kubectl delete node), its pod left bound to its name, running
    drain.admin.delete_node(node_name(0))
    assert server.get_object("pods", "web-0", "default") is not None
    # ...and the API server fails every read of the budget ConfigMap at blue's polls, until past its drain timeout
    failing = [Fault("etcd", "kube-error", "GET configmaps")]
    outcome = drain.polled(TIMEOUT_AT + timedelta(seconds=2 * EVERY), failing)

    # Then green's node was granted the slot once blue's holder expired, before blue's drain timeout
    drain.green_holds_the_slot_before(TIMEOUT_AT)
    # And blue's drain did not end its node's action at its drain timeout beside node 1's drain (its pod would go
    # with the instance): paused from its slot's certain expiry, a wait for a slot (invariant 9)
    assert outcome.again, outcome
    assert drain.record.drain_paused_at is not None
    noted = datetime.fromisoformat(str(drain.record.extra[UNRENEWED]))
    assert drain.failing_at is not None
    assert drain.failing_at < noted <= drain.failing_at + timedelta(seconds=DRAIN_RETRY_CAP_SECONDS)
    assert drain.record.drain_paused_at == noted + policy().holder_ttl


def test_a_renewal_whose_write_a_webhook_fails_at_every_try_does_not_end_beside_the_node_granted_its_slot(
    server: KubeServer,
) -> None:
    # Given blue's drain of node 0 at its eviction, polled once
    drain = _Drain(server)
    assert drain.polled(drain.clock.now() + timedelta(seconds=EVERY)).again
    # When a validating webhook on ConfigMaps (failurePolicy Fail) cannot be reached: every write of the budget is
    # answered 500 and nothing is written, at blue's polls, until past its drain timeout
    down = [Fault("webhook", "kube-webhook-down", "PUT configmaps")]
    outcome = drain.polled(TIMEOUT_AT + timedelta(seconds=2 * EVERY), down)

    # Then green's node was granted the slot once blue's holder expired, before blue's drain timeout
    drain.green_holds_the_slot_before(TIMEOUT_AT)
    # And blue's drain, none of whose renewals landed, did not end its node's action at its drain timeout beside
    # node 1's drain: paused from its slot's certain expiry, a wait for a slot (invariant 9), evicting nothing once
    # its renewals failed (before, at each poll, while its slot was its own, its PodDisruptionBudget refused them)
    assert outcome.again, outcome
    assert drain.record.drain_paused_at is not None
    assert drain.failing_at is not None
    assert drain.granted_at is not None
    assert drain.failing_at < drain.granted_at
    assert drain.evictions() == drain.evicted_when_failing


def test_a_renewal_whose_answer_is_lost_at_every_try_holds_the_slot_no_longer_than_the_drain_s_time(
    server: KubeServer,
) -> None:
    # Given blue's drain of node 0 at its eviction, polled once
    drain = _Drain(server)
    assert drain.polled(drain.clock.now() + timedelta(seconds=EVERY)).again
    # When every write of the budget is applied and its answer lost (the connection closed before it), to the end
    lost = [Fault("lb", "kube-lost-response", "PUT configmaps")]
    outcome = drain.polled(GLOBAL_AT, lost)

    # Then blue's renewals landed: its slot stayed its own, green never granted it, its drain time ran, and its
    # timeout policy ended it within its timeout, force grace and margin (invariant 10)
    assert drain.granted_at is None
    assert not outcome.again
    assert outcome.changes.get("outcome") == "drain-timeout-forced", outcome
    force = timedelta(seconds=policy().force_grace) + FORCED_POD_SLACK
    assert drain.clock.now() <= TIMEOUT_AT + force + timedelta(seconds=2 * EVERY)
