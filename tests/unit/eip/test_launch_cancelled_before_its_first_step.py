"""A launch whose first step (ASSIGN_EIP) finds no active action for its token: Auto Scaling ended it with its
instance (a scale-in right after the scale-out, a Spot instance reclaimed at once), or it never had it (a forged
or foreign pair). Only where the instance is tells them apart (``engine.instance_left``): the first ends as
``instance-gone`` (no page), the second as ``unknown-action`` (LifecycleActionsUnknown: the alarm)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.engine import action_lapsed, advance, gone_counted
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import Step
from nodecycle.domain.ports.lifecycle import Membership, WorkMessage
from tests.support.fakes import FakeAutoscaling, FakeClock, FakeMetrics, InMemoryRecords
from tests.unit.eip.fakes import GROUP, T0, FakeAddresses, launch_record
from tests.unit.eip.test_eip_steps_in_the_engine import INSTANCE, eip_engine

OTHER_GROUP = "someone-elses"


@pytest.mark.parametrize(
    ("listed", "in_ec2", "outcome"),
    [
        # terminate hooks hold it: its group lists it on its way out (EC2 says running)
        pytest.param(("Terminating:Wait", GROUP), None, "instance-gone", id="terminating-in-its-group"),
        pytest.param(("Terminating:Proceed", GROUP), None, "instance-gone", id="terminating-unheld"),
        # a scale-in with ReuseOnScaleIn sends it back to its warm pool (the terminate hook holds it on the way),
        # which ends its launch action as a termination does
        pytest.param(("Warmed:Pending:Wait", GROUP), None, "instance-gone", id="back-to-its-warm-pool"),
        pytest.param(("Warmed:Stopped", GROUP), None, "instance-gone", id="waiting-in-its-warm-pool"),
        # no group lists it any more: EC2 shows it going, tagged with the record's group
        pytest.param(None, ("terminated", GROUP), "instance-gone", id="terminated-with-its-groups-tag"),
        pytest.param(None, ("shutting-down", GROUP), "instance-gone", id="shutting-down-with-its-groups-tag"),
        # forged or foreign pairs: nothing shows the group had the instance, or it is still there
        pytest.param(("InService", GROUP), None, "unknown-action", id="in-service-in-the-group"),
        pytest.param(("Pending:Wait", GROUP), None, "unknown-action", id="held-by-another-token"),
        pytest.param(("Terminating:Wait", OTHER_GROUP), None, "unknown-action", id="another-groups-leaving"),
        pytest.param(None, ("terminated", OTHER_GROUP), "unknown-action", id="terminated-another-groups"),
        pytest.param(None, ("terminated", None), "unknown-action", id="terminated-of-no-group"),
        pytest.param(None, ("running", GROUP), "unknown-action", id="running-out-of-any-group"),
        pytest.param(None, None, "unknown-action", id="unknown-to-both"),
    ],
)
def test_a_launch_whose_token_is_refused_at_its_first_step_ends_as_gone_only_when_its_instance_went(
    listed: tuple[str, str] | None, in_ec2: tuple[str, str | None] | None, outcome: str
) -> None:
    # Given a launch at its first step, its action never confirmed, whose token Auto Scaling refuses; its
    # instance where ``listed`` (state, group) or, listed by no group, ``in_ec2`` (EC2 state, group tag) says
    clock, ec2, records, metrics = FakeClock(T0), FakeAddresses(), InMemoryRecords(), FakeMetrics()
    ec2.launch(INSTANCE)
    record = launch_record(INSTANCE, verified_at=None)
    records.create(record)
    autoscaling = FakeAutoscaling(issued={}, clock=clock)
    if listed is not None:
        autoscaling.states[INSTANCE], autoscaling.group_of[INSTANCE] = listed
    if in_ec2 is not None:
        autoscaling.in_ec2[INSTANCE] = in_ec2
    engine = eip_engine(ec2, records, clock, autoscaling=autoscaling, metrics=metrics)

    # When the step runs
    engine.handle(WorkMessage(record_id=record.id, seq=record.seq, step=Step.ASSIGN_EIP))

    # Then the launch ends past its completion, nothing assigned nor completed: as gone when its instance went
    # from the record's group; as an unknown action, counted for the alarm, otherwise
    ended = records.get(record.id)
    assert ended is not None
    assert (ended.step, ended.outcome, ended.completed_at) == (Step.DONE, outcome, None)
    assert metrics.counts.get("LifecycleActionsUnknown", 0) == (outcome == "unknown-action")
    assert metrics.counts.get("LifecycleActionsExpired", 0) == 0
    assert ec2.eips == {}
    assert autoscaling.completed == []


def test_a_live_token_of_the_instances_terminate_action_named_as_its_launch_is_still_unknown() -> None:
    # Given a launch message that names a terminating instance of the group with the live token of its terminate
    # action (Auto Scaling takes the heartbeat: no call names the transition)
    clock, ec2, records, metrics = FakeClock(T0), FakeAddresses(), InMemoryRecords(), FakeMetrics()
    ec2.launch(INSTANCE)
    record = launch_record(INSTANCE, verified_at=None)
    records.create(record)
    autoscaling = FakeAutoscaling(issued={}, clock=clock)
    autoscaling.issue(record.token, INSTANCE, at=T0, held_in="Terminating:Wait")
    autoscaling.states[INSTANCE], autoscaling.group_of[INSTANCE] = "Terminating:Wait", GROUP
    engine = eip_engine(ec2, records, clock, autoscaling=autoscaling, metrics=metrics)

    # When the step runs
    engine.handle(WorkMessage(record_id=record.id, seq=record.seq, step=Step.ASSIGN_EIP))

    # Then it is an unknown action: the action is active, so none ended with its instance
    ended = records.get(record.id)
    assert ended is not None
    assert (ended.step, ended.outcome) == (Step.DONE, "unknown-action")
    assert metrics.counts["LifecycleActionsUnknown"] == 1
    assert ec2.eips == {}
    assert autoscaling.completed == []


class WhereaboutsUnanswered(FakeAutoscaling):
    def membership(self, instance_id: str) -> Membership:
        raise TransientError("Rate exceeded")


def test_a_refused_token_whose_instance_cannot_be_placed_now_is_retried_not_counted_unknown() -> None:
    # Given a launch at its first step whose token Auto Scaling refuses, and Auto Scaling throttling the look at
    # where its instance is
    clock, ec2, records, metrics = FakeClock(T0), FakeAddresses(), InMemoryRecords(), FakeMetrics()
    ec2.launch(INSTANCE)
    record = launch_record(INSTANCE, verified_at=None)
    records.create(record)
    autoscaling = WhereaboutsUnanswered(issued={}, clock=clock)
    engine = eip_engine(ec2, records, clock, autoscaling=autoscaling, metrics=metrics)

    # When the step runs
    engine.handle(WorkMessage(record_id=record.id, seq=record.seq, step=Step.ASSIGN_EIP))

    # Then the step is retried later (it may be either), nothing counted as unknown, nothing assigned
    retried = records.get(record.id)
    assert retried is not None
    assert (retried.step, retried.finished, retried.attempts) == (Step.ASSIGN_EIP, False, 1)
    assert metrics.counts.get("LifecycleActionsUnknown", 0) == 0
    assert ec2.eips == {}


@pytest.mark.parametrize(
    ("confirmed", "in_ec2", "outcome", "expired"),
    [
        # confirmed in its group before: an instance no group lists any more has left it
        pytest.param(True, None, "instance-gone", 0, id="confirmed-in-no-group"),
        # never confirmed (the sweeper's keep-alive of a launch whose first step has not run): only EC2's word
        pytest.param(
            False, ("terminated", GROUP), "instance-gone", 0, id="unconfirmed-terminated-of-its-group"
        ),
        pytest.param(False, None, "action-expired", 1, id="unconfirmed-unknown-to-ec2"),
        pytest.param(
            False, ("terminated", OTHER_GROUP), "action-expired", 1, id="unconfirmed-another-groups"
        ),
    ],
)
def test_a_lapsed_launch_ends_as_gone_on_the_evidence_its_confirmation_gave(
    confirmed: bool, in_ec2: tuple[str, str | None] | None, outcome: str, expired: int
) -> None:
    # Given a launch whose action a heartbeat (the engine's keep-alive, or the sweeper's) found gone before its
    # timeouts, its instance listed by no group; confirmed in its group before, or never
    clock, records, metrics = FakeClock(T0), InMemoryRecords(), FakeMetrics()
    record = launch_record(INSTANCE, verified_at=T0 if confirmed else None)
    autoscaling = FakeAutoscaling(issued={}, clock=clock)
    if in_ec2 is not None:
        autoscaling.in_ec2[INSTANCE] = in_ec2

    # When its lapse is settled
    ended = action_lapsed(record, T0 + timedelta(seconds=30), autoscaling, records)
    gone_counted(records, record, advance(record, ended, T0 + timedelta(seconds=30)), True, metrics)

    # Then it ends as gone only on what shows the instance left the record's group; else as an expiry (counted)
    assert ended.changes["outcome"] == outcome
    assert metrics.counts.get("LifecycleActionsExpired", 0) == expired


@pytest.mark.parametrize(
    ("destination", "state", "outcome", "expired"),
    [
        # a launch into the group whose instance a scale-in sent back to its warm pool (ReuseOnScaleIn) before it
        # was in service: the move ended its launch action, as a termination does
        pytest.param(None, "Warmed:Pending:Wait", "instance-gone", 0, id="into-the-group-back-to-the-pool"),
        pytest.param("AutoScalingGroup", "Warmed:Running", "instance-gone", 0, id="out-of-the-pool-and-back"),
        # a launch into the pool is held there by its own action: found gone there, it lapsed
        pytest.param("WarmPool", "Warmed:Pending:Wait", "action-expired", 1, id="into-the-pool-still-there"),
    ],
)
def test_a_lapsed_launch_whose_instance_is_back_in_its_warm_pool_ended_with_the_move(
    destination: str | None, state: str, outcome: str, expired: int
) -> None:
    # Given a confirmed launch whose action a heartbeat found gone before its timeouts, its instance listed by
    # its group in a warm pool state
    clock, records, metrics = FakeClock(T0), InMemoryRecords(), FakeMetrics()
    record = launch_record(INSTANCE, verified_at=T0).model_copy(update={"destination": destination})
    autoscaling = FakeAutoscaling(issued={}, clock=clock)
    autoscaling.states[INSTANCE], autoscaling.group_of[INSTANCE] = state, GROUP

    # When its lapse is settled
    ended = action_lapsed(record, T0 + timedelta(seconds=30), autoscaling, records)
    gone_counted(records, record, advance(record, ended, T0 + timedelta(seconds=30)), True, metrics)

    # Then a launch into the group ends as gone (no page for an action nothing let lapse); one into the pool as
    # an expiry
    assert ended.changes["outcome"] == outcome
    assert metrics.counts.get("LifecycleActionsExpired", 0) == expired
