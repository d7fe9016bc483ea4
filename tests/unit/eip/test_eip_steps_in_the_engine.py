"""The EIP steps run by the step engine: waits become delayed messages on the EIP queue, the step's scratch
survives the commit, and a finished assignment hands over to the drain worker."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.completion import CompleteAction
from nodecycle.domain.eip import SCRATCH
from nodecycle.domain.eip.assign import VERIFY_DELAY, AssignAddress
from nodecycle.domain.eip.release import ReleaseAddresses
from nodecycle.domain.engine import EngineTiming, Handled, StepEngine
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import LifecycleRecord, Step, global_deadline
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.lifecycle import WorkMessage
from nodecycle.settings import EipSettings
from nodecycle.wiring.common import eip_policy
from tests.support.fakes import FakeAutoscaling, FakeClock, FakeMetrics, InMemoryRecords, RecordingQueues
from tests.unit.eip.fakes import GROUP, OWNER, T0, FakeAddresses, FakeLines, launch_record, terminate_record

INSTANCE = "i-0fedcba9876543210"
QUICK = EngineTiming(
    resume_grace=timedelta(minutes=3),
    heartbeat_margin=timedelta(seconds=60),
    redelivery=timedelta(0),
    settle_before=timedelta(seconds=60),
)


def eip_engine(
    ec2: FakeAddresses,
    records: InMemoryRecords,
    clock: FakeClock,
    *,
    queues: RecordingQueues | None = None,
    autoscaling: FakeAutoscaling | None = None,
    timing: EngineTiming | None = None,
    lines: FakeLines | None = None,
    mode: str = "allocate",
    metrics: FakeMetrics | None = None,
) -> StepEngine:
    """The eip function's engine: its two steps on the fake EC2, ASSIGN_EIP with the pools' lines and the
    engine's own records (nodecycle.wiring.eip)."""
    settings = EipSettings.model_validate(
        {
            "owner_id": OWNER,
            "record_table": "records",
            "drain_queue_url": "https://sqs.example/drain",
            "eip_queue_url": "https://sqs.example/eip",
            "wake_queue_url": "https://sqs.example/wake",
            "managed_groups": GROUP,
            "eip_mode": mode,
            "eip_pool_name": "ci" if mode == "pool" else None,
        }
    )
    metrics = metrics if metrics is not None else FakeMetrics()
    autoscaling = autoscaling or FakeAutoscaling()
    return StepEngine(
        worker=Worker.EIP,
        steps={
            Step.COMPLETE: CompleteAction(autoscaling, metrics),
            Step.ASSIGN_EIP: AssignAddress(
                owner=OWNER,
                policy=eip_policy(settings),
                addresses=ec2,
                metrics=metrics,
                lines=lines if lines is not None else FakeLines(),
                records=records,
                groups=autoscaling,
            ),
            Step.RELEASE_EIP: ReleaseAddresses(owner=OWNER, addresses=ec2, metrics=metrics),
        },
        records=records,
        queues=queues or RecordingQueues(),
        autoscaling=autoscaling,
        clock=clock,
        metrics=metrics,
        timing=timing or QUICK,
        failure_result=lambda record: ActionResult.ABANDON,
    )


def test_an_association_that_does_not_show_yet_comes_back_on_the_eip_queue_and_then_hands_over() -> None:
    # Given the engine of the eip function, and EC2 that shows a new association only on the second read
    ec2, records, queues, clock = FakeAddresses(lag=1), InMemoryRecords(), RecordingQueues(), FakeClock(T0)
    ec2.launch(INSTANCE)
    engine = eip_engine(ec2, records, clock, queues=queues)
    record = launch_record(INSTANCE)
    records.create(record)

    # When the launch's work message is handled
    assert engine.handle(WorkMessage(record_id=record.id, seq=0, step=Step.ASSIGN_EIP)) is Handled.RAN

    # Then the same step comes back on the EIP queue a moment later, with what it must verify committed
    (again,) = queues.take()
    assert (again.worker, again.message.step, again.message.seq, again.delay) == (
        Worker.EIP,
        Step.ASSIGN_EIP,
        1,
        VERIFY_DELAY,
    )
    waiting = records.get(record.id)
    assert waiting is not None
    assert waiting.extra["eip"]["verify"]["allocation_id"] == ec2.on(INSTANCE)[0].allocation_id

    # And when that message comes, the association shows and the readiness gate's message goes to drain
    clock.advance(VERIFY_DELAY)
    assert engine.handle(again.message) is Handled.RAN
    (handover,) = queues.take()
    assert (handover.worker, handover.message.step) == (Worker.DRAIN, Step.READY_GATE)
    done = records.get(record.id)
    assert done is not None
    assert done.allocation_id == ec2.on(INSTANCE)[0].allocation_id
    assert done.extra == {}


# -- a disruptive step that comes after its action may have lapsed ------------------------------------------

HEARTBEAT = 300  # the hook's heartbeat timeout
DEFAULTS = EngineTiming(
    resume_grace=timedelta(seconds=60),
    heartbeat_margin=timedelta(seconds=60),
    redelivery=timedelta(seconds=150),
    settle_before=timedelta(seconds=420),
)


def timed(record: LifecycleRecord, **changes: object) -> LifecycleRecord:
    """``record`` under the hook's own timers, last heartbeated at T0."""
    return record.model_copy(
        update={
            "heartbeat_timeout": HEARTBEAT,
            "heartbeat_deadline": T0 + timedelta(seconds=HEARTBEAT),
            "global_deadline": global_deadline(T0, HEARTBEAT),
            **changes,
        }
    )


def test_a_release_that_comes_after_its_action_lapsed_leaves_the_address_of_the_instance_back_in_service() -> (
    None
):
    # Given a scale-in into the warm pool, confirmed at T0, its RELEASE_EIP due a minute later; the instance's
    # address on it
    clock, ec2, records = FakeClock(T0), FakeAddresses(), InMemoryRecords()
    ec2.launch(INSTANCE)
    address = ec2.add(allocated_for=INSTANCE, allocated_at=T0 - timedelta(hours=1), on=INSTANCE)
    record = timed(terminate_record(INSTANCE, destination="WarmPool"), due_at=T0 + timedelta(seconds=60))
    records.create(record)
    autoscaling = FakeAutoscaling(clock=clock, action_timeout=HEARTBEAT)
    autoscaling.issue(record.token, INSTANCE, at=T0)

    # When its message comes only 15 minutes on (a stalled queue, throttled heartbeats): the action timed out
    # meanwhile, and the instance, back from its pool, is in service again with its address
    clock.advance(900)
    eip_engine(ec2, records, clock, autoscaling=autoscaling, timing=DEFAULTS).handle(
        WorkMessage(record_id=record.id, seq=record.seq, step=Step.RELEASE_EIP)
    )

    # Then Auto Scaling is asked again before anything is taken back: the action is gone, the address stays
    assert [eip.allocation_id for eip in ec2.on(INSTANCE)] == [address]
    moved = records.get(record.id)
    assert moved is not None
    assert moved.outcome == "action-expired"


def test_an_assignment_that_comes_after_its_action_lapsed_leaves_the_instance_in_service_as_it_is() -> None:
    # Given a launch confirmed at T0, waiting for its pending instance
    clock, ec2, records = FakeClock(T0), FakeAddresses(), InMemoryRecords()
    ec2.launch(INSTANCE, state="pending")
    record = timed(
        launch_record(INSTANCE), due_at=T0 + timedelta(seconds=5), extra={SCRATCH: {"instance_attempts": 1}}
    )
    records.create(record)
    autoscaling = FakeAutoscaling(clock=clock, action_timeout=HEARTBEAT)
    autoscaling.issue(record.token, INSTANCE, at=T0)

    # When its next try comes after the action timed out with the hook's default CONTINUE: the instance is in
    # service, reachable at its own public IP
    ec2.launch(INSTANCE, state="running")
    clock.advance(600)
    eip_engine(ec2, records, clock, autoscaling=autoscaling, timing=DEFAULTS).handle(
        WorkMessage(record_id=record.id, seq=record.seq, step=Step.ASSIGN_EIP)
    )

    # Then its public IP is not changed under its connections
    assert ec2.on(INSTANCE) == []
    moved = records.get(record.id)
    assert moved is not None
    assert moved.outcome == "action-expired"


def test_a_step_that_runs_late_but_whose_action_is_still_alive_goes_on_and_renews_it() -> None:
    # Given a scale-in whose release comes after the record's heartbeat deadline, its action kept alive by
    # someone else meanwhile (the sweeper's heartbeat, whose record write lost)
    clock, ec2, records = FakeClock(T0), FakeAddresses(settling=0), InMemoryRecords()
    ec2.launch(INSTANCE)
    ec2.add(allocated_for=INSTANCE, allocated_at=T0 - timedelta(hours=1), on=INSTANCE)
    record = timed(terminate_record(INSTANCE), due_at=T0 + timedelta(seconds=60))
    records.create(record)
    autoscaling = FakeAutoscaling(clock=clock, action_timeout=HEARTBEAT)
    autoscaling.issue(record.token, INSTANCE, at=T0)
    autoscaling.kept_alive(record.token, T0 + timedelta(seconds=250))
    clock.advance(400)

    eip_engine(ec2, records, clock, autoscaling=autoscaling, timing=DEFAULTS).handle(
        WorkMessage(record_id=record.id, seq=record.seq, step=Step.RELEASE_EIP)
    )

    # Then the release goes on, the action confirmed again (and renewed by that heartbeat), then completed
    assert ec2.on(INSTANCE) == []
    moved = records.get(record.id)
    assert moved is not None
    assert moved.verified_at == clock.now()
    assert [action for action, _ in autoscaling.completed] == [record.action]


def test_a_launch_whose_action_lapsed_in_the_pools_line_keeps_no_address_from_the_launch_behind_it() -> None:
    # Given pool mode, the pool's one address on an old instance, and a launch that found the pool empty at T0
    # and waits in the pool's line
    clock, ec2, records, lines = FakeClock(T0), FakeAddresses(), InMemoryRecords(), FakeLines()
    ec2.add(pool="ci", on=ec2.launch("i-old"))
    waiting = timed(launch_record(ec2.launch(INSTANCE)), due_at=T0)
    records.create(waiting)
    autoscaling = FakeAutoscaling(clock=clock, action_timeout=HEARTBEAT)
    autoscaling.issue(waiting.token, INSTANCE, at=T0)
    engine = eip_engine(
        ec2, records, clock, autoscaling=autoscaling, timing=DEFAULTS, lines=lines, mode="pool"
    )
    engine.handle(WorkMessage(record_id=waiting.id, seq=waiting.seq, step=Step.ASSIGN_EIP))
    assert lines.waiting() == [INSTANCE]
    # And its next look comes after its action timed out (a stalled queue): the engine ends its lifecycle,
    # as action-expired, without the step (nothing takes it out of the line)
    clock.advance(HEARTBEAT + 60)
    stored = records.get(waiting.id)
    assert stored is not None
    engine.handle(WorkMessage(record_id=stored.id, seq=stored.seq, step=Step.ASSIGN_EIP))
    lapsed = records.get(waiting.id)
    assert lapsed is not None
    assert lapsed.outcome == "action-expired"
    assert lines.waiting() == [INSTANCE]

    # When the old instance's address comes back and a new launch looks, within the lapsed one's wait
    ec2.terminate("i-old")
    new = timed(launch_record(ec2.launch("i-new"), at=clock.now()), due_at=clock.now())
    records.create(new)
    autoscaling.issue(new.token, "i-new", at=clock.now())
    engine.handle(WorkMessage(record_id=new.id, seq=new.seq, step=Step.ASSIGN_EIP))

    # Then the new launch takes it (the lapsed launch's record, as the engine left it, says it waits no more)
    assert [eip.instance_id for eip in ec2.eips.values()] == ["i-new"]
    went_on = records.get(new.id)
    assert went_on is not None
    assert went_on.step is not Step.ASSIGN_EIP


@pytest.mark.parametrize(
    ("state", "outcome", "expired"),
    [
        # the group terminates the instance (a scale-in, an operator), terminate hooks holding it: EC2 says
        # running, Auto Scaling ended the launch action with the termination
        ("Terminating:Wait", "instance-gone", 0),
        ("Terminating:Proceed", "instance-gone", 0),
        (None, "instance-gone", 0),  # terminated, in no group any more
        # completed by hand, the instance in service: an action nodecycle held ended without it
        ("InService", "action-expired", 1),
    ],
)
def test_a_launch_in_line_whose_action_ended_before_its_timeouts_ends_as_gone_only_with_its_instance(
    state: str | None, outcome: str, expired: int
) -> None:
    # Given pool mode, the pool's one address on an old instance, and a launch waiting in the pool's line since
    # T0, its action confirmed then
    clock, ec2, records, metrics = FakeClock(T0), FakeAddresses(), InMemoryRecords(), FakeMetrics()
    ec2.add(pool="ci", on=ec2.launch("i-old"))
    waiting = timed(launch_record(ec2.launch(INSTANCE)), due_at=T0)
    records.create(waiting)
    autoscaling = FakeAutoscaling(clock=clock, action_timeout=HEARTBEAT)
    autoscaling.issue(waiting.token, INSTANCE, at=T0)
    engine = eip_engine(
        ec2, records, clock, autoscaling=autoscaling, timing=DEFAULTS, mode="pool", metrics=metrics
    )
    engine.handle(WorkMessage(record_id=waiting.id, seq=waiting.seq, step=Step.ASSIGN_EIP))

    # When its action ends before any of its timeouts, the instance where ``state`` says, and the launch looks
    # again when its heartbeat is due (well before the hook's heartbeat timeout)
    autoscaling.completed.append((waiting.action, ActionResult.ABANDON))
    if state is not None:
        autoscaling.states[INSTANCE] = state
    clock.advance(HEARTBEAT - 60 - 150 + 5)
    stored = records.get(waiting.id)
    assert stored is not None
    engine.handle(WorkMessage(record_id=stored.id, seq=stored.seq, step=Step.ASSIGN_EIP))

    # Then the launch ends past its completion: as gone, uncounted, when its instance is leaving its group; as
    # an expired action otherwise (the expired-actions alarm)
    ended = records.get(waiting.id)
    assert ended is not None
    assert (ended.finished, ended.outcome) == (True, outcome)
    assert metrics.counts.get("LifecycleActionsExpired", 0) == expired
    assert ec2.on(INSTANCE) == []
