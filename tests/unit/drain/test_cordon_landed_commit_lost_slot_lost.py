"""A first cordon whose PATCH landed but whose step's commit was lost (the invocation killed after the PATCH, the
lifecycle table's write failed or throttled): the retry finds the node cordoned under this lifecycle's claim, its
record still at the cordon with no drain start. If its budget slot was lost meanwhile (its holder expired while the
container was paused or the API server was out, an operator released it as stuck, the ConfigMap was created again
and the seeded slot did not fit), the node is already disrupted: cordoned, its pods no longer replaced there.

Design invariant 9: such a drain in progress keeps precedence over nodes not yet touched, and its wait for a slot
is not drain time. Asked as a first cordon (``in_progress`` false, since the record told no drain start), it went
back to the slot's ask, in line behind every untouched node that asked first, its node left cordoned; and once
granted, its drain was dated from the annotation's start (``_cordoned_at``), so the time it waited counted against
its timeout and its timeout policy could force its pods at once."""

from __future__ import annotations

import json
from datetime import timedelta

from nodecycle.domain.engine import advance
from nodecycle.domain.model import Step, Transition
from tests.support.fakes import T0
from tests.unit.drain.test_drain_steps import (
    INSTANCE,
    NODE,
    OWNER,
    FakeCluster,
    FakeSlots,
    cordon,
    node,
    policy,
    terminating,
)


def test_a_cordon_that_landed_with_its_commit_lost_and_its_slot_lost_waits_as_a_drain_in_progress() -> None:
    # Given a first cordon that landed at T0 (its claim on the node, cordoned), whose commit was lost: the record is
    # still at its cordon with no drain start; its slot lost meanwhile, an untouched node of the stack waiting in line
    claim = {"instance": INSTANCE, "transition": Transition.TERMINATING.short, "token": "token"}
    in_progress = json.dumps({**claim, "started": T0.isoformat(), "cordon": True, "lb": False})
    cluster = FakeCluster(nodes={NODE: node(owner=OWNER, in_progress=in_progress, unschedulable=True)})
    timeout = policy().timeout
    record = terminating(Step.CORDON, node=NODE, zone="eu-west-1a", global_deadline=T0 + 10 * timeout)
    slots = FakeSlots(lost=True, waiters=("rec-untouched",))

    # When its step is tried again 5 minutes later
    at = T0 + timedelta(minutes=5)
    paused = cordon(cluster, slots=slots)(record, at)

    # Then it asks as a drain in progress and is paused where it is, not sent back to the slot's ask
    assert slots.requests[-1].in_progress
    assert paused.then is None, paused
    assert paused.changes.get("drain_paused_at") == at

    # When the node that took its room is done: the room goes to the drain in progress, not to the untouched node
    slots.lost = False
    assert slots.holders == {NODE}

    # And when its cordon is tried again 10 minutes later: its drain dated from its cordon, moved by the pause
    back = at + timedelta(minutes=10)
    waiting = advance(record, paused, at).model_copy(update={"step": Step.CORDON})
    outcome = cordon(cluster, slots=slots)(waiting, back)
    assert outcome.changes["drain_started_at"] == T0
    assert outcome.changes["drain_deadline"] == T0 + timeout + timedelta(minutes=10)
    assert outcome.changes["drain_paused_at"] is None
