"""A drain whose slot's renewal is refused mid-way: the budget ConfigMap crowded near the API server's 1 MiB by keys the
budget does not write (BudgetCrowdedOut), or the stack's binding to the budget's Role gone (403). Its poll evicts nothing
from the first refusal on, so when its holder expires and the slot is granted to another node, no two drains evict
under a budget of one (invariant 1). Its holder expired, its slot is lost for certain: from then on it waits for a slot
as a drain paused for a lost slot does, the wait not counted against its own drain timeout (invariant 9), so it does not
end its node's action at that timeout beside the node granted its slot; it ends at the latest its timeout policy may
act before the action's global timeout (invariant 2). On the sandbox API server, through the product's adapters and the
EVICT step."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from kubernetes.client import RbacAuthorizationV1Api

from nodecycle.adapters.kube.budget import BudgetCrowdedOut
from nodecycle.domain.drain.common import _deadline_cap
from nodecycle.domain.drain.evict import READS_REFUSED
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import Step
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE, admin_api, node_name
from tests.integration.budget.recreation import BEGAN, record_of, slot_of
from tests.integration.budget.test_configmap_recreated import TTL, budget_of, request
from tests.support.budget_refusals import kept_drain, move_the_backup_out, paste_a_backup
from tests.unit.drain.test_drain_steps import policy

EVERY = policy().poll_seconds  # the drain's poll interval
TIMEOUT_AT = BEGAN + timedelta(minutes=30)  # the drain's deadline (see lifecycle_of)
# The action's global timeout: its drain's deadline may be moved up to 8 min 5 s before it (the force grace, a stuck
# pod's minute and the settle margin of the test's policy), 12:35:55
GLOBAL_AT = BEGAN + timedelta(minutes=45)


def test_a_drain_refused_its_renewal_evicts_nothing_while_its_expired_slot_is_granted_to_another(
    server: KubeServer,
) -> None:
    # Given a budget of 1 held by node 0's drain (claimed), whose pod a PodDisruptionBudget keeps (each poll asks it
    # to leave again), and node 1's lifecycle waiting for a slot
    drain = kept_drain(server)
    drain.records.create(record_of(slot_of(1), Step.ACQUIRE_SLOT, seq=1))
    clock, blue = drain.clock, drain.blue

    def polled() -> Outcome:
        clock.advance(EVERY)
        return drain.stored(drain.poll())

    assert polled().again
    assert drain.evictions() == 1
    # When a backup pasted beside the document fills the ConfigMap's data to 10 bytes short of 1 MiB, which leaves
    # no room for the holder's clock note: each renewal of node 0's drain that writes is refused (BudgetCrowdedOut)
    paste_a_backup(server, short_of_a_mib=10)
    # ...and node 0's drain polls on past its holder's expiry, node 1 asking at each poll
    refused_at = None
    after_refusal = 0
    while refused_at is None or clock.now() < refused_at + TTL + timedelta(seconds=2 * EVERY):
        assert polled().again
        if READS_REFUSED in drain.record.extra and refused_at is None:
            refused_at, after_refusal = clock.now(), drain.evictions()
        with pytest.raises(BudgetCrowdedOut):
            blue.acquire(slot_of(1))

    # Then node 0's drain evicted nothing from its first refused renewal on, and nobody took its slot meanwhile
    assert refused_at is not None
    assert drain.evictions() == after_refusal
    # And once the backup is moved out, its holder expired, node 1 is granted the slot; node 0's drain, which lost
    # it, evicts nothing at its next polls (paused, in line), beside node 1's
    move_the_backup_out(server)
    assert blue.acquire(slot_of(1)).granted
    for _ in range(3):
        assert polled().again
    assert drain.evictions() == after_refusal
    assert drain.record.drain_paused_at is not None
    assert [h.node for h in blue.snapshot().holders] == [node_name(1)]


def test_a_drain_refused_its_renewal_past_its_slot_s_expiry_does_not_end_beside_the_node_granted_its_slot(
    server: KubeServer,
) -> None:
    # Given a budget of 1 held by stack blue's drain of node 0 (claimed), whose pod a PodDisruptionBudget keeps
    drain = kept_drain(server, global_deadline=GLOBAL_AT)
    clock = drain.clock
    # When blue's binding to the budget's Role is deleted (a GitOps prune of one stack's RBAC), stack green's kept
    RbacAuthorizationV1Api(server.api_client()).delete_namespaced_role_binding("nodecycle-budget", NAMESPACE)
    # (green's drain: the administrator's client stands in for its own identity, which its binding still lets in)
    green = budget_of(admin_api(server), clock, "green", "1", "1")
    # ...blue's drain polls, refused its renewal at each, and green's node 1 asks at each poll
    granted_at: datetime | None = None
    refused_at: datetime | None = None

    def polled(until: datetime) -> Outcome:
        nonlocal granted_at, refused_at
        outcome = None
        while outcome is None or (outcome.again and clock.now() < until):
            clock.advance(EVERY if outcome is None else max(EVERY, outcome.delay))  # (as its waits ask)
            outcome = drain.stored(drain.poll())
            if refused_at is None and READS_REFUSED in drain.record.extra:
                refused_at = clock.now()
            if granted_at is None and green.acquire(request(1, owner="green")).granted:
                granted_at = clock.now()
        return outcome

    outcome = polled(TIMEOUT_AT + timedelta(seconds=2 * EVERY))
    # (green's node was granted the slot once blue's holder expired, a TTL after its last renewal)
    assert granted_at is not None
    assert granted_at < TIMEOUT_AT
    assert [h.node for h in green.snapshot().holders] == [node_name(1)]
    assert server.get_object("pods", "web-0", "default") is not None

    # Then blue's drain, which lost its slot a TTL after its first refusal, does not end its node's action (its
    # instance terminated, the pod the PodDisruptionBudget keeps with it) beside node 1's drain, the budget's one
    # slot: the time past its slot's expiry is a wait for a slot, not drain time (invariant 9), as a paused drain's
    assert outcome.again, outcome
    assert refused_at is not None
    assert drain.record.drain_paused_at == refused_at + policy().holder_ttl
    # And, the budget refusing it to the end (node 1 never releasing here), it ends at the latest its timeout policy
    # may act before the action's global timeout (invariant 2: Auto Scaling's own timeout would end it there
    # anyway), a drain timeout (drain-timeout-reads-refused) 6 min 55 s past its own, having evicted nothing
    outcome = polled(GLOBAL_AT)
    assert (outcome.then, outcome.changes.get("outcome")) == (Step.COMPLETE, "drain-timeout-reads-refused")
    assert clock.now() == _deadline_cap(drain.record, policy()) < GLOBAL_AT
    assert drain.evictions() == 0
