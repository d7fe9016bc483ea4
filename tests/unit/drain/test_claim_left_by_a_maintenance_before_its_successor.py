"""A maintenance's lifecycle that intake moved to an earlier maintenance EC2 lists while it still lists the one the
lifecycle was taken in for (intake's ``_rescheduled``: another maintenance of the instance before it) goes on under
the earlier maintenance's event id, and the later maintenance follows it on the record as its successor, under the
event id that told of it: the token the moved lifecycle had when it cordoned the node (its claim names it).

Should the moved lifecycle's cleanup give up its release (the API server out or refusing for longer than
RELEASE_FAILING_FOR), its claim stays on the node under that token. The successor, which starts on the record once
the moved lifecycle is done, is not the lifecycle that claim is of: taken for its own cordon landed unrecorded (as in
test_cordon_claim_of_an_earlier_lifecycle), its first cordon asked for its slot as a drain in progress and its drain
was dated from the moved lifecycle's cordon, its deadline long past at its first poll."""

from __future__ import annotations

import json
from datetime import timedelta

from nodecycle.domain.drain.acquire import RecordedLifecycles
from nodecycle.domain.intake import IntakeOutcome
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.sweep.sweeper import record_over
from tests.support.fakes import T0, FakeAutoscaling, FakeClock, InMemoryRecords
from tests.unit.drain.test_claim_of_a_maintenance_moved_earlier import (
    EARLIER,
    STARTS,
    MaintainedInstance,
    reboot,
)
from tests.unit.drain.test_drain_steps import INSTANCE, NODE, FakeCluster, FakeSlots, cordon, node, policy
from tests.unit.foundation.test_intake import intake

CORDONED = T0 - timedelta(days=2)  # when the moved lifecycle's cordon claimed the node
LATER = STARTS - timedelta(hours=1)  # when its successor's cordon runs


def successor_with_the_claim_left_before_it() -> tuple[LifecycleRecord, FakeCluster, InMemoryRecords]:
    """The record's successor at its first cordon, and the node as the moved lifecycle left it."""
    records, clock, ec2 = InMemoryRecords(), FakeClock(), MaintainedInstance(STARTS)
    taking = intake(FakeAutoscaling(), records, clock, instances=ec2)
    assert taking.accept_disruption(reboot("health-event-1", STARTS)) is IntakeOutcome.ACCEPTED
    (draining,) = records.items.values()
    draining = draining.model_copy(update={"step": Step.EVICT, "node": NODE, "drain_started_at": CORDONED})
    records.items[draining.id] = draining
    claim = {"instance": INSTANCE, "transition": "scheduled-change", "token": draining.token}
    progress = json.dumps({**claim, "started": CORDONED.isoformat(), "cordon": True, "lb": False})
    cluster = FakeCluster(nodes={NODE: node(owner=draining.owner, in_progress=progress, unschedulable=True)})
    # (EC2 lists another maintenance before it, and the one it was taken in for still)
    ec2.starts = (EARLIER, STARTS)
    assert taking.accept_disruption(reboot("health-event-2", EARLIER)) is IntakeOutcome.ACCEPTED
    moved = records.items[draining.id]
    assert moved.successor is not None
    # (the moved lifecycle done, its release given up; its successor starts on the record)
    done = moved.model_copy(update={"step": Step.DONE})
    following = done.followed_by(moved.successor).model_copy(
        update={"seq": done.seq + 1, "step": Step.CORDON, "node": NODE, "zone": "eu-west-1a"}
    )
    records.items[following.id] = following
    return following, cluster, records


def test_the_successor_does_not_take_the_moved_lifecycles_leftover_claim_for_its_own() -> None:
    following, cluster, _ = successor_with_the_claim_left_before_it()
    slots = FakeSlots(holders={NODE}, held_for={NODE: following.id})

    outcome = cordon(cluster, slots=slots)(following, LATER)

    # Its drain starts with its own cordon, its pods given the whole drain timeout
    assert outcome.changes["drain_started_at"] == LATER
    assert outcome.changes["drain_deadline"] == LATER + policy().timeout


def test_the_successor_asks_for_its_slot_as_an_untouched_node_not_as_a_drain_in_progress() -> None:
    following, cluster, _ = successor_with_the_claim_left_before_it()
    slots = FakeSlots(lost=True, waiters=("rec-untouched",))

    outcome = cordon(cluster, slots=slots)(following, LATER)

    assert not slots.requests[-1].in_progress
    assert outcome.then is Step.ACQUIRE_SLOT, outcome


def test_the_moved_lifecycles_leftover_claim_reads_over_once_its_successor_started() -> None:
    following, cluster, records = successor_with_the_claim_left_before_it()
    token = str(cluster.nodes[NODE].progress()["token"])

    assert RecordedLifecycles(records).over(following.id, token)
    assert record_over(following, token)
