"""Intake's domain: an action that reaches intake late is heartbeated there, before its first step can be late; a
lifecycle whose first message was lost is sent it again by its event's retry."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta

import pytest

from nodecycle.domain.catalog import LifecycleHooks, ManagedGroups
from nodecycle.domain.errors import TransientError
from nodecycle.domain.flow import Worker
from nodecycle.domain.intake import Intake, IntakeOutcome
from nodecycle.domain.model import ActionRef, DisruptionEvent, LifecycleEvent, Step, Transition
from nodecycle.domain.policy import PlanPolicy
from nodecycle.domain.ports.instances import InstanceDirectory, InstanceFacts, ScheduledEvent
from nodecycle.domain.ports.lifecycle import Hook, WorkMessage
from tests.support.fakes import T0, FakeAutoscaling, FakeClock, FakeMetrics, InMemoryRecords, RecordingQueues

GROUP, HOOK = "nodes", "terminate"
TIMEOUT = 30  # the hook's heartbeat timeout
WINDOW = timedelta(seconds=17)  # the heartbeat margin (10 s) plus a redelivery (7 s)


class OneAction(FakeAutoscaling):
    """Auto Scaling with exactly one active action, known by its token; a heartbeat may be refused."""

    def __init__(self, token: str, throttled: bool = False) -> None:
        super().__init__(
            issued={token: None},
            hooks={(GROUP, HOOK): Hook(Transition.TERMINATING, heartbeat_timeout=TIMEOUT)},
        )
        self.throttled = throttled

    def heartbeat(self, action: ActionRef) -> bool:
        if self.throttled:
            raise TransientError("Rate exceeded")
        return super().heartbeat(action)


def event(
    token: str = "7b4c5d2e-1f3a-4b6c-8d9e-0a1b2c3d4e5f",
    age: float = 0.0,
    transition: Transition = Transition.TERMINATING,
) -> LifecycleEvent:
    return LifecycleEvent(
        instance_id="i-0123456789abcdef0",
        transition=transition,
        token=token,
        group=GROUP,
        hook=HOOK,
        started_at=T0 - timedelta(seconds=age),
        delivery="sqs",
    )


def intake(
    autoscaling: FakeAutoscaling,
    records: InMemoryRecords,
    clock: FakeClock,
    queues: RecordingQueues | None = None,
    instances: InstanceDirectory | None = None,
) -> Intake:
    return Intake(
        owner="stack-a",
        plan=PlanPolicy(kubernetes=True, eip=False, readiness_gate=True),
        records=records,
        queues=queues or RecordingQueues(),
        groups=ManagedGroups(
            owner="stack-a", names=(GROUP,), by_tag=False, hooks=("*",), autoscaling=autoscaling, clock=clock
        ),
        hooks=LifecycleHooks(autoscaling, clock),
        autoscaling=autoscaling,
        clock=clock,
        metrics=FakeMetrics(),
        resume_grace=timedelta(seconds=5),
        retry_window=WINDOW,
        instances=instances,
    )


def test_an_action_accepted_with_less_than_the_margin_and_a_redelivery_left_is_heartbeated_at_once() -> None:
    # Given an action that reaches intake 18 s after it started: 12 s of its 30 s heartbeat timeout left
    late = event(age=18)
    autoscaling, records, clock = OneAction(late.token), InMemoryRecords(), FakeClock()

    # When intake accepts it
    assert intake(autoscaling, records, clock).accept(late) is IntakeOutcome.ACCEPTED

    # Then that action was heartbeated, and its record counts a full timeout from now (not the proof: the
    # engine's first confirmation also looks where the instance is, see Autoscaling.confirm)
    assert autoscaling.heartbeats == [late.action]
    (record,) = records.items.values()
    assert record.heartbeat_deadline == T0 + timedelta(seconds=TIMEOUT)
    assert (record.heartbeats, record.verified_at) == (1, None)


def test_an_action_accepted_in_good_time_is_left_to_its_first_step() -> None:
    fresh = event(age=2)  # 28 s left: more than the window
    autoscaling, records, clock = OneAction(fresh.token), InMemoryRecords(), FakeClock()

    assert intake(autoscaling, records, clock).accept(fresh) is IntakeOutcome.ACCEPTED

    assert autoscaling.heartbeats == []
    (record,) = records.items.values()
    assert record.heartbeat_deadline == fresh.started_at + timedelta(seconds=TIMEOUT)
    assert (record.heartbeats, record.verified_at) == (0, None)


@pytest.mark.parametrize("throttled", [False, True], ids=["not-an-active-action", "throttled"])
def test_a_late_action_whose_heartbeat_fails_is_still_recorded_unverified(throttled: bool) -> None:
    # Given a late delivery that Auto Scaling does not know as active (forged, replayed), or a throttled API
    late = event(age=18)
    autoscaling = OneAction("another-token" if not throttled else late.token, throttled=throttled)
    records, clock = InMemoryRecords(), FakeClock()

    # When intake accepts it
    outcome = intake(autoscaling, records, clock).accept(late)

    # Then the event is not lost: its record is stored as it came, for the engine to verify before it disrupts
    assert outcome is IntakeOutcome.ACCEPTED
    (record,) = records.items.values()
    assert record.heartbeat_deadline == late.started_at + timedelta(seconds=TIMEOUT)
    assert (record.heartbeats, record.verified_at) == (0, None)


def test_an_event_whose_transition_is_not_its_hooks_is_dropped_before_anything_is_planned() -> None:
    # Given a terminating instance's active action, and a message naming it (its hook, its token) as a launch:
    # a launch plans a completion with CONTINUE, which Auto Scaling would accept for that token
    forged = event(transition=Transition.LAUNCHING)
    autoscaling, records, clock = OneAction(forged.token), InMemoryRecords(), FakeClock()

    # When intake reads it
    outcome = intake(autoscaling, records, clock).accept(forged)

    # Then it is refused for what it is, and nothing is recorded, heartbeated or completed
    assert outcome is IntakeOutcome.WRONG_HOOK
    assert (records.items, autoscaling.heartbeats, autoscaling.completed) == ({}, [], [])


def test_a_hook_recreated_for_the_other_transition_is_read_again_before_an_event_is_refused() -> None:
    # Given intake that has read the hook as a terminate hook, which is then recreated under its name as a
    # launch hook (within the cache's minute)
    autoscaling, records, clock = (
        OneAction("7b4c5d2e-1f3a-4b6c-8d9e-0a1b2c3d4e5f"),
        InMemoryRecords(),
        FakeClock(),
    )
    hooks = intake(autoscaling, records, clock)
    assert hooks.accept(event()) is IntakeOutcome.ACCEPTED
    autoscaling.hooks[(GROUP, HOOK)] = Hook(Transition.LAUNCHING, heartbeat_timeout=TIMEOUT)

    # When the new hook's first launch comes, Then it is accepted
    launch = event(token="0e1f2a3b-4c5d-4e6f-8a9b-0c1d2e3f4a5b", transition=Transition.LAUNCHING)
    assert hooks.accept(launch) is IntakeOutcome.ACCEPTED


def test_a_group_named_in_the_settings_but_tagged_for_another_stack_is_left_to_that_stack() -> None:
    # Given a group named in stack-a's managed groups, and tagged nodecycle:owner=stack-b (stack-b manages
    # groups by tag): both stacks would take the very same actions, and the one that lost the budget slot
    # would complete the action while the other still drains
    autoscaling = FakeAutoscaling(
        tags={GROUP: {"nodecycle:owner": "stack-b"}, "ours": {"nodecycle:owner": "stack-a"}}
    )
    groups = ManagedGroups(
        owner="stack-a",
        names=(GROUP, "ours", "untagged"),
        by_tag=False,
        hooks=("*",),
        autoscaling=autoscaling,
        clock=FakeClock(),
    )
    theirs = ManagedGroups(
        owner="stack-b", names=(), by_tag=True, hooks=("*",), autoscaling=autoscaling, clock=FakeClock()
    )

    # Then only stack-b manages it; a named group tagged for this stack, or not tagged, is this stack's
    assert theirs.manages(GROUP, HOOK)
    assert not groups.manages(GROUP, HOOK)
    assert groups.manages("ours", HOOK)
    assert groups.manages("untagged", HOOK)


class OneSpotInstance:
    """EC2 as intake asks it of one running Spot instance of the group."""

    def facts(self, instance_id: str) -> InstanceFacts | None:
        return InstanceFacts(instance_id, "running", GROUP, {}, spot_request="sir-0123456789")

    def facts_of(self, instance_ids: Collection[str]) -> dict[str, InstanceFacts]:
        return {i: facts for i in instance_ids if (facts := self.facts(i)) is not None}

    def scheduled_events(self, instance_id: str) -> list[ScheduledEvent]:
        return []

    def spot_interruption_noticed(self, spot_request: str) -> bool:
        return True


class SendFailsOnce(RecordingQueues):
    """SQS refusing one SendMessage (throttled past botocore's retries), or a container killed before it."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = False

    def send(self, worker: Worker, message: WorkMessage, delay_seconds: int = 0) -> None:
        if self.failing:
            self.failing = False
            raise TransientError("sending work to the drain queue: Throttling")
        super().send(worker, message, delay_seconds)


def spot_warning(event_id: str, at: datetime) -> DisruptionEvent:
    return DisruptionEvent(
        instance_id="i-0123456789abcdef0",
        cause=Transition.SPOT_INTERRUPTION,
        event_id=event_id,
        happened_at=at,
        strikes_at=at + timedelta(minutes=2),
        delivery="eventbridge",
    )


def test_a_duplicate_before_a_lost_first_message_is_overdue_sends_a_watch_that_comes_once_it_is() -> None:
    # Given a Spot interruption's lifecycle written, whose first message SQS refused (or whose container died
    # before it sent it): intake's invocation failed, and Lambda retries it
    records, clock, queues = InMemoryRecords(), FakeClock(), SendFailsOnce()
    taking = intake(FakeAutoscaling(), records, clock, queues, OneSpotInstance())
    warning = spot_warning("5d0c7e0a-95b3-4c4c-9d0e-6a2f1b8e7c31", T0)
    queues.failing = True
    with pytest.raises(TransientError):
        taking.accept_disruption(warning)
    written = records.items[warning.record_id]

    # When the retry comes before the first step is overdue (Lambda's first retry comes after about a minute,
    # ResumeGraceSeconds may be longer; EventBridge may also deliver the event twice at once)
    clock.advance(2)
    outcome = taking.accept_disruption(warning)

    # Then it is a duplicate, but it sends a watch of the lifecycle's first step that comes once that step is
    # overdue and sends it again if nothing ran (the engine's watch): before, nothing was sent, the event's
    # retries ended, and the lifecycle waited for the next sweep, minutes after the interruption's two
    assert outcome is IntakeOutcome.DUPLICATE
    (sent,) = queues.take()
    assert (sent.message.step, sent.message.seq, sent.message.watch) == (Step.ACQUIRE_SLOT, 0, 0)
    overdue_in = (written.due_at + timedelta(seconds=5) - clock.now()).total_seconds()
    assert overdue_in < sent.delay <= overdue_in + 2


def test_a_restarted_lifecycle_whose_first_message_was_lost_is_sent_again_by_its_events_retry() -> None:
    # Given a Spot instance whose interruption's lifecycle is over (it stopped, and was started again since),
    # and intake that restarts its record for a second interruption but cannot send its first step
    records, clock, queues = InMemoryRecords(), FakeClock(), SendFailsOnce()
    taking = intake(FakeAutoscaling(), records, clock, queues, OneSpotInstance())
    first = spot_warning("5d0c7e0a-95b3-4c4c-9d0e-6a2f1b8e7c31", T0)
    assert taking.accept_disruption(first) is IntakeOutcome.ACCEPTED
    over = records.items[first.record_id]
    done_at = T0 + timedelta(seconds=90)
    records.items[first.record_id] = over.model_copy(
        update={"step": Step.DONE, "seq": 5, "updated_at": done_at, "finished_at": done_at}
    )
    clock.advance(3600)
    second = spot_warning("0e1f2a3b-4c5d-4e6f-8a9b-0c1d2e3f4a5b", clock.now())
    queues.take()
    queues.failing = True
    with pytest.raises(TransientError):
        taking.accept_disruption(second)
    restarted = records.items[second.record_id]
    assert (restarted.token, restarted.step, restarted.seq) == (second.event_id, Step.ACQUIRE_SLOT, 6)
    # (a duplicate delivery before its step is overdue is only that, and a watch for when it is)
    assert taking.accept_disruption(second) is IntakeOutcome.DUPLICATE
    assert [s.message.watch for s in queues.take()] == [restarted.seq]

    # When the event is delivered again, a minute later (Lambda's retry of a failed asynchronous invocation)
    clock.advance(60)
    outcome = taking.accept_disruption(second)

    # Then its first step is sent again, as for a lifecycle that was new: the drain has two minutes, and the
    # next sweep may come after they are over
    assert outcome is IntakeOutcome.RESENT
    assert [(s.message.step, s.message.seq) for s in queues.take()] == [(Step.ACQUIRE_SLOT, restarted.seq)]


@pytest.mark.parametrize(
    ("state", "move", "replaces_root_volume"),
    [
        ("ReplacingRootVolume:Wait", ("AutoScalingGroup", "AutoScalingGroup"), True),
        ("Warmed:Terminating:Wait", ("WarmPool", "EC2"), False),
        ("Terminating:Wait", (None, None), False),
    ],
    ids=["root-volume-replacement", "out-of-the-warm-pool", "termination"],
)
def test_an_action_told_without_origin_nor_destination_takes_the_move_its_instances_state_tells(
    state: str, move: tuple[str | None, str | None], replaces_root_volume: bool
) -> None:
    # Given a terminate action told by the queue without Origin nor Destination, its instance waiting in ``state``
    told = event()
    autoscaling, records, clock = OneAction(told.token), InMemoryRecords(), FakeClock()
    autoscaling.states[told.instance_id] = state

    # When intake accepts it
    assert intake(autoscaling, records, clock).accept(told) is IntakeOutcome.ACCEPTED

    # Then its lifecycle is the move that state tells: a root volume replacement keeps its instance (no release
    # of its address, its cordon lifted once it is back), a warm pool's instance has no node to drain
    (record,) = records.items.values()
    assert (record.origin, record.destination) == move
    assert record.replaces_root_volume is replaces_root_volume
