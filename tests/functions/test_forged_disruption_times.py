"""Disruptions whose event says they happen later than now, on the intake queue (anyone allowed to send to it can
write an EC2 event, with any time): what EC2 confirms of them is taken in, but timed from no later than now.
Timed from the message, a Spot interruption's drain would take its deadline as hours away (no precedence in the
budget's line, evictions a PodDisruptionBudget blocks waited for as if there were time), and the true warning,
by EventBridge minutes later, would be a duplicate of it: the node reclaimed two minutes after, undrained."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.catalog import LifecycleHooks, ManagedGroups
from nodecycle.domain.intake import Intake, IntakeOutcome
from nodecycle.domain.model import DisruptionEvent, Transition
from nodecycle.domain.policy import PlanPolicy
from tests.support.fakes import T0, FakeAutoscaling, FakeClock, FakeMetrics, InMemoryRecords, RecordingQueues
from tests.unit.foundation.test_owner_disruptions import INSTANCE, OneInstance

SPOT_NOTICE = timedelta(minutes=2)


def intake_of(records: InMemoryRecords) -> Intake:
    """Intake of a stack that manages group "nodes", whose one instance is a Spot instance EC2 has marked for
    interruption (its request says so); its clock at T0."""
    autoscaling, clock = FakeAutoscaling(), FakeClock()
    return Intake(
        owner="team",
        plan=PlanPolicy(kubernetes=True, eip=False, readiness_gate=True),
        records=records,
        queues=RecordingQueues(),
        groups=ManagedGroups(
            owner="team", names=("nodes",), by_tag=False, hooks=("*",), autoscaling=autoscaling, clock=clock
        ),
        hooks=LifecycleHooks(autoscaling, clock),
        autoscaling=autoscaling,
        clock=clock,
        metrics=FakeMetrics(),
        resume_grace=timedelta(seconds=5),
        retry_window=timedelta(seconds=17),
        instances=OneInstance("nodes", {}),
    )


def spot_warning(happened_after: timedelta, delivery: str, event_id: str) -> DisruptionEvent:
    at = T0 + happened_after
    return DisruptionEvent(
        instance_id=INSTANCE,
        cause=Transition.SPOT_INTERRUPTION,
        event_id=event_id,
        happened_at=at,
        strikes_at=at + SPOT_NOTICE,
        delivery=delivery,
    )


@pytest.mark.parametrize("ahead", [timedelta(hours=1), timedelta(days=300)])
def test_a_spot_warning_on_the_queue_with_a_time_still_to_come_is_timed_from_now(ahead: timedelta) -> None:
    # Given a Spot instance of a managed group that EC2 has marked for interruption (its request says so), and
    # a Spot warning of it on the intake queue that says it was sent some time from now (T0 is now)
    records = InMemoryRecords()
    intake = intake_of(records)
    forged = spot_warning(ahead, "sqs-eventbridge", "0b9f5f7e-1111-4222-8333-944455556666")

    # When intake takes it in, then the true warning by EventBridge
    assert intake.accept_disruption(forged) is IntakeOutcome.ACCEPTED
    true = spot_warning(timedelta(0), "eventbridge", "5d0c7e0a-95b3-4c4c-9d0e-6a2f1b8e7c31")
    intake.accept_disruption(true)

    # Then the node's drain is due by the interruption EC2 confirms, two minutes from now at the latest, not
    # from the time the message said
    record = records.get(f"{INSTANCE}/spot-interruption")
    assert record is not None
    assert record.global_deadline <= T0 + SPOT_NOTICE
    assert record.heartbeat_deadline <= T0 + SPOT_NOTICE
    assert record.started_at <= T0
