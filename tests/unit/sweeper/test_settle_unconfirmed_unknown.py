"""An action no step confirmed, at its last chance before its global timeout (its queue stalled since its event, or a
message dated so: a forged pair naming an instance in service with another instance's live token), that Auto Scaling
does not have where its instance is: the sweeper's settlement asks first, and ends its lifecycle as the unknown
action it is (``LifecycleActionsUnknown``), not as an action settled near its global timeout (``GlobalTimeoutsNear``,
and settled elsewhere: an operator would look for a stalled drain that never was)."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.model import Step
from tests.unit.foundation.test_engine import PLAN, make_record
from tests.unit.sweeper.test_sweeper import INTERVAL, MARGIN, Repair


def test_an_unconfirmed_action_auto_scaling_does_not_have_ends_unknown_at_the_sweepers_last_chance() -> None:
    # Given a lifecycle taken in for an instance in service (Auto Scaling holds no action of its token there),
    # waiting at its slot with no step run that confirms, a sweep before its global timeout
    repair = Repair()
    repair.autoscaling.issue("token", "i-victim", held_in="Terminating:Wait")
    record = make_record(PLAN, Step.ACQUIRE_SLOT, seq=2, verified_at=None)
    repair.autoscaling.states[record.instance_id] = "InService"
    repair.clock.current = record.global_deadline - INTERVAL - MARGIN
    # (its heartbeat deadline ahead, as intake dates one it took in late: no expiry to find)
    record = record.model_copy(update={"heartbeat_deadline": repair.clock.current + timedelta(seconds=200)})
    assert repair.records.create(record)

    # When the sweep reaches it at its last chance
    counts = repair.run()

    # Then nothing is completed, and the lifecycle ends as the unknown action it is
    assert repair.autoscaling.completed == []
    ended = repair.records.get(record.id)
    assert ended is not None
    assert (ended.outcome, ended.completed_at) == ("unknown-action", None)
    assert repair.metrics.counts.get("GlobalTimeoutsNear", 0) == 0
    assert repair.metrics.counts.get("LifecycleActionsSettledElsewhere", 0) == 0
    assert repair.metrics.counts["LifecycleActionsUnknown"] == 1
    assert counts["LifecyclesUnknown"] == 1
    assert counts["LifecyclesSettled"] == 0
