"""A cordon refused before it renews its budget slot: once a holder TTL has passed since the first such refusal in a
row, its slot may be another node's, and it waits for one as any waiter does (see
tests/integration/budget/test_budget_renewal_unrenewed_at_cordon_and_failing.py). Granted again, its drain's time
starts then: the time without its slot was a wait, not drain time (invariant 9)."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.drain.cordon import CORDON_UNRENEWED
from nodecycle.domain.model import Step
from tests.support.fakes import T0
from tests.unit.drain.test_drain_steps import NODE, FakeCluster, FakeSlots, cordon, node, policy, terminating

WHY = 'configmaps "nodecycle-budget" is forbidden: User "drain" cannot get resource "configmaps"'


def test_a_cordon_granted_its_slot_again_after_losing_it_unrenewed_starts_its_drain_time_then() -> None:
    # Given a drain at its cordon whose slot's renewal RBAC refused from T0 on, past its drain timeout and its slot's
    # expiry (a holder TTL later)
    cluster = FakeCluster(nodes={NODE: node()})
    slots = FakeSlots(holders={NODE}, refused=WHY)
    record = terminating(Step.CORDON, node=NODE, global_deadline=T0 + 4 * policy().timeout)
    first = cordon(cluster, slots=slots)(record, T0)
    record = record.model_copy(update=dict(first.changes))
    later = T0 + policy().timeout + timedelta(seconds=100)
    waiting = cordon(cluster, slots=slots)(record, later)
    record = record.model_copy(update=dict(waiting.changes))

    # When the binding is back and its next try renews the slot (granted again: room left)
    slots.refused = None
    back = later + timedelta(seconds=30)
    outcome = cordon(cluster, slots=slots)(record, back)

    # Then it waited past its drain timeout, and, cordoned now, its drain's time runs from now, its notes dropped
    assert waiting.again, waiting
    assert outcome.then is None
    assert not outcome.again
    assert outcome.changes["drain_started_at"] == back
    assert outcome.changes["drain_deadline"] == back + policy().timeout
    assert CORDON_UNRENEWED not in outcome.changes["extra"]
    assert NODE in cluster.cordoned
