"""A drain in progress that goes back to its cordon (someone uncordoned its node, or its node was registered again:
see Evict._poll) and finds its budget slot lost there (an operator released it as stuck, its ConfigMap was created
again and the seeded slot did not fit, its holder expired while its polls failed).

Its node is cordoned and partly drained: disruption in progress, which goes before the nodes not yet touched, and
whose wait for a slot is not drain time (invariant 9). The eviction's poll pauses such a drain (``drain_paused_at``)
and asks with that precedence; the cordon asked as for a first cordon instead: in line behind every untouched node
that asked first, and sent back to the slot's ask with its drain's start and deadline kept, so that once it had a
slot again the time it waited counted against its timeout, and its timeout policy forced its pods at once."""

from __future__ import annotations

import json
from datetime import timedelta

from nodecycle.domain.dispatch import waits_for_slot
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


def test_a_drain_in_progress_that_finds_its_slot_lost_at_its_cordon_again_pauses_and_goes_first() -> None:
    # Given a drain in progress since T0 whose node someone uncordoned (its claim still on it), sent back to its
    # cordon by its poll; its slot lost meanwhile, and an untouched node of the stack waiting in line since before
    claim = {"instance": INSTANCE, "transition": Transition.TERMINATING.short, "token": "token"}
    in_progress = json.dumps({**claim, "started": T0.isoformat(), "cordon": True, "lb": False})
    cluster = FakeCluster(nodes={NODE: node(owner=OWNER, in_progress=in_progress, unschedulable=False)})
    timeout = policy().timeout
    record = terminating(
        Step.CORDON, node=NODE, zone="eu-west-1a", drain_started_at=T0, drain_deadline=T0 + timeout
    )
    slots = FakeSlots(lost=True, waiters=("rec-untouched",))

    # When the cordon is asked again, 5 minutes into the drain
    at = T0 + timedelta(minutes=5)
    paused = cordon(cluster, slots=slots)(record, at)

    # Then the node is not cordoned, and the drain is paused in line as a drain in progress
    assert cluster.patches == []
    assert slots.requests[-1].in_progress
    assert paused.changes.get("drain_paused_at") == at
    assert paused.then is None  # (asked again at the cordon, as the eviction's poll asks again while paused)

    # When the node that took its room is done: the room goes to the drain in progress, not to the untouched node
    slots.lost = False
    assert slots.holders == {NODE}

    # And when its cordon is asked again 10 minutes later, and taken: its deadline is moved by the pause
    back = at + timedelta(minutes=10)
    waiting = advance(record, paused, at).model_copy(update={"step": Step.CORDON})
    outcome = cordon(cluster, slots=slots)(waiting, back)
    assert cluster.patches
    assert outcome.changes["drain_started_at"] == T0
    assert outcome.changes["drain_deadline"] == T0 + timeout + timedelta(minutes=10)
    assert outcome.changes["drain_paused_at"] is None


def test_a_drain_paused_at_its_cordon_is_woken_by_a_freed_slot() -> None:
    # Given a drain in progress paused at its cordon again, and one at its first cordon (not waiting: it holds its
    # slot)
    paused = terminating(
        Step.CORDON, node=NODE, drain_started_at=T0, drain_paused_at=T0 + timedelta(minutes=5)
    )
    first = terminating(Step.CORDON, node=NODE)

    # Then a slot freed moves the paused one on (its wake-up is sent), as a drain paused at its poll
    assert waits_for_slot(paused)
    assert not waits_for_slot(first)
