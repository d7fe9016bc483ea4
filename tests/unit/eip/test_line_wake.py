"""An address given back wakes the first launch waiting in its line: it is claimed at once, not at the waiter's
next look (15 s on), and still in the order of the line (nodecycle.domain.eip.wake)."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.completion import CompleteAction
from nodecycle.domain.eip.assign import FIRST_IN_LINE_DELAY, AssignAddress
from nodecycle.domain.eip.release import ReleaseAddresses
from nodecycle.domain.eip.wake import LineWaker
from nodecycle.domain.engine import EngineTiming, Handled, StepEngine
from nodecycle.domain.errors import TransientError
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.policy import ActionResult, EipFailurePolicy, EipMode, EipPolicy
from nodecycle.domain.ports.lifecycle import WorkMessage
from nodecycle.domain.sweep.addresses import AddressSweep
from tests.support.fakes import FakeAutoscaling, FakeClock, FakeMetrics, InMemoryRecords, RecordingQueues
from tests.unit.eip.fakes import OWNER, T0, FakeAddresses, FakeLines, launch_record, terminate_record
from tests.unit.sweeper.test_orphans import AMPLE

TIMING = EngineTiming(
    resume_grace=timedelta(minutes=3),
    heartbeat_margin=timedelta(seconds=60),
    redelivery=timedelta(0),
    settle_before=timedelta(seconds=60),
)


class Stack:
    """The eip function (nodecycle.wiring.eip) on the fakes: ASSIGN_EIP and RELEASE_EIP over one EC2, one store
    of lines and records, the work queues recorded. Another stack (``owner``) in the same account shares its
    ``ec2`` and has a table and queues of its own."""

    def __init__(
        self,
        mode: EipMode,
        queues: RecordingQueues | None = None,
        *,
        owner: str = OWNER,
        ec2: FakeAddresses | None = None,
        grow_pool: bool = False,
    ) -> None:
        self.clock, self.records = FakeClock(T0), InMemoryRecords()
        self.ec2 = ec2 if ec2 is not None else FakeAddresses(quota=1)
        self.lines, self.autoscaling = FakeLines(), FakeAutoscaling()
        self.queues = queues or RecordingQueues()
        pool = "ci" if mode is EipMode.POOL else None
        policy = EipPolicy(
            mode=mode,
            pool=pool,
            grow_pool=grow_pool,
            on_failure=EipFailurePolicy.ABANDON,
            wait=timedelta(minutes=10),
        )
        metrics = FakeMetrics()
        waker = LineWaker(
            owner=owner,
            lines=self.lines,
            records=self.records,
            queues=self.queues,
            quota_pool=pool if grow_pool else None,  # (as nodecycle.wiring.eip wires it)
            addresses=self.ec2,
        )
        assign = AssignAddress(
            owner=owner,
            policy=policy,
            addresses=self.ec2,
            metrics=metrics,
            lines=self.lines,
            records=self.records,
            groups=self.autoscaling,
            waker=waker,
        )
        self.engine = StepEngine(
            worker=Worker.EIP,
            steps={
                Step.COMPLETE: CompleteAction(self.autoscaling, metrics),
                Step.ASSIGN_EIP: assign,
                Step.RELEASE_EIP: ReleaseAddresses(
                    owner=owner, addresses=self.ec2, metrics=metrics, waker=waker
                ),
            },
            records=self.records,
            queues=self.queues,
            autoscaling=self.autoscaling,
            clock=self.clock,
            metrics=metrics,
            timing=TIMING,
            failure_result=lambda record: ActionResult.ABANDON,
            out_of_line=assign.ended_in_line,
        )

    def run(self, record: LifecycleRecord) -> Handled:
        stored = self.records.get(record.id)
        assert stored is not None
        return self.engine.handle(WorkMessage(record_id=stored.id, seq=stored.seq, step=stored.step))

    def launch_waiting(self, instance: str) -> LifecycleRecord:
        """A launch that finds nothing free now, and waits in line (its next look on the queue, delayed)."""
        record = launch_record(self.ec2.launch(instance), at=self.clock.now())
        assert self.records.create(record)
        assert self.run(record) is Handled.RAN
        assert self.step(record) is Step.ASSIGN_EIP
        return record

    def step(self, record: LifecycleRecord) -> Step:
        stored = self.records.get(record.id)
        assert stored is not None
        return stored.step


def a_pool_of_one_on(stack: Stack, old: str) -> str:
    stack.ec2.launch(old)
    return stack.ec2.add(pool="ci", on=old)


def test_an_address_given_back_is_claimed_at_once_by_the_first_launch_in_line_not_by_a_later_one() -> None:
    # Given a pool of one address on an old instance, a launch waiting first in line, and one that came after
    stack = Stack(EipMode.POOL)
    pooled = a_pool_of_one_on(stack, "i-old")
    first = stack.launch_waiting("i-first")
    stack.clock.advance(5)
    later = stack.launch_waiting("i-later")
    assert stack.lines.waiting() == ["i-first", "i-later"]
    looks = stack.queues.take()
    assert {sent.delay for sent in looks} >= {FIRST_IN_LINE_DELAY}

    # When the old instance's terminate gives the address back (its RELEASE_EIP, after the drain)
    stack.clock.advance(1)
    leaving = terminate_record("i-old", at=stack.clock.now(), step=Step.RELEASE_EIP)
    assert stack.records.create(leaving)
    assert stack.run(leaving) is Handled.RAN

    # Then the first launch in line, and only it, is sent its look now, marked as a wake-up
    woken = [sent for sent in stack.queues.take() if sent.message.record_id != leaving.id]
    assert [(s.worker, s.message.record_id, s.message.wake, s.delay) for s in woken] == [
        (Worker.EIP, first.id, True, 0)
    ]
    # And that look, run at once (not 15 s on), claims the address
    assert stack.engine.handle(woken[0].message) is Handled.RAN
    assert stack.ec2.eips[pooled].instance_id == "i-first"
    assert stack.step(first) is not Step.ASSIGN_EIP
    # And the later launch's own look, when it comes, waits on (it never took the address first)
    stack.clock.advance(FIRST_IN_LINE_DELAY)
    stack.run(later)
    assert stack.step(later) is Step.ASSIGN_EIP
    assert stack.ec2.eips[pooled].instance_id == "i-first"


def test_a_waiter_whose_lifecycle_is_over_is_passed_over_and_the_next_one_woken() -> None:
    # Given a pool of one address on an old instance, and two launches in line, the first of which ended
    # elsewhere without leaving the line (its record done)
    stack = Stack(EipMode.POOL)
    pooled = a_pool_of_one_on(stack, "i-old")
    gone = stack.launch_waiting("i-gone")
    stack.clock.advance(5)
    second = stack.launch_waiting("i-second")
    stored = stack.records.get(gone.id)
    assert stored is not None
    assert stack.records.commit(stored.model_copy(update={"step": Step.DONE}), stored.seq)
    stack.queues.take()

    # When the old instance's terminate gives the address back
    leaving = terminate_record("i-old", at=stack.clock.now(), step=Step.RELEASE_EIP)
    assert stack.records.create(leaving)
    stack.run(leaving)

    # Then the second launch is woken, and its look takes the address (the first waits for nothing)
    woken = [sent.message for sent in stack.queues.take() if sent.message.record_id != leaving.id]
    assert [(message.record_id, message.wake) for message in woken] == [(second.id, True)]
    assert stack.engine.handle(woken[0]) is Handled.RAN
    assert stack.ec2.eips[pooled].instance_id == "i-second"


def test_a_wake_up_that_comes_twice_or_after_the_waiters_own_look_claims_nothing_more() -> None:
    # Given a launch first in line woken by an address given back
    stack = Stack(EipMode.POOL)
    pooled = a_pool_of_one_on(stack, "i-old")
    first = stack.launch_waiting("i-first")
    (own_look,) = stack.queues.take()
    leaving = terminate_record("i-old", at=stack.clock.now(), step=Step.RELEASE_EIP)
    assert stack.records.create(leaving)
    stack.run(leaving)
    (wake,) = [sent.message for sent in stack.queues.take() if sent.message.record_id == first.id]

    # When the wake-up is delivered twice, and the waiter's own delayed look comes too
    assert stack.engine.handle(wake) is Handled.RAN
    went_on = stack.records.get(first.id)
    assert went_on is not None
    assert stack.engine.handle(wake) is Handled.WATCHING
    stack.clock.advance(FIRST_IN_LINE_DELAY)
    assert stack.engine.handle(own_look.message) is Handled.WATCHING

    # Then the address was claimed once, and the lifecycle moved on once
    assert [eip.allocation_id for eip in stack.ec2.on("i-first")] == [pooled]
    assert stack.records.get(first.id) == went_on


def test_an_address_released_under_the_quota_wakes_the_first_launch_waiting_for_the_quota() -> None:
    # Given allocate mode, the quota's one address on an old instance, and a launch waiting for the quota
    stack = Stack(EipMode.ALLOCATE)
    stack.ec2.launch("i-old")
    stack.ec2.add(allocated_for="i-old", on="i-old")
    first = stack.launch_waiting("i-first")
    stack.queues.take()

    # When the old instance's terminate releases its address
    leaving = terminate_record("i-old", at=stack.clock.now(), step=Step.RELEASE_EIP)
    assert stack.records.create(leaving)
    stack.ec2.settling = 0
    assert stack.run(leaving) is Handled.RAN

    # Then the waiting launch is woken, and its look allocates one at once
    (wake,) = [sent.message for sent in stack.queues.take() if sent.message.record_id == first.id]
    assert wake.wake
    assert stack.engine.handle(wake) is Handled.RAN
    assert len(stack.ec2.on("i-first")) == 1


class RefusingQueues(RecordingQueues):
    """SQS refusing every wake-up (throttled): the other messages go."""

    def send(self, worker: Worker, message: WorkMessage, delay_seconds: int = 0) -> None:
        if message.wake:
            raise TransientError("SQS throttled the wake-up")
        super().send(worker, message, delay_seconds)


def test_a_wake_up_that_cannot_be_sent_fails_neither_the_release_nor_the_waiters_own_look() -> None:
    # Given a launch first in line, and SQS refusing wake-ups
    stack = Stack(EipMode.POOL, queues=RefusingQueues())
    pooled = a_pool_of_one_on(stack, "i-old")
    stack.launch_waiting("i-first")
    (own_look,) = stack.queues.take()

    # When the old instance's terminate gives the address back
    leaving = terminate_record("i-old", at=stack.clock.now(), step=Step.RELEASE_EIP)
    assert stack.records.create(leaving)
    assert stack.run(leaving) is Handled.RAN

    # Then the release goes on, and the waiter's own look claims the address when it comes
    assert stack.step(leaving) is not Step.RELEASE_EIP
    stack.clock.advance(own_look.delay)
    assert stack.engine.handle(own_look.message) is Handled.RAN
    assert stack.ec2.eips[pooled].instance_id == "i-first"


def test_a_pool_address_the_sweeper_takes_back_from_a_gone_instance_wakes_the_first_launch_in_line() -> None:
    # Given a pool of one address left on an instance gone without its release (its hook's lifecycle lost),
    # and a launch waiting first in line, another after it
    stack = Stack(EipMode.POOL)
    pooled = a_pool_of_one_on(stack, "i-old")
    first = stack.launch_waiting("i-first")
    stack.clock.advance(5)
    stack.launch_waiting("i-later")
    stack.queues.take()
    stack.ec2.instances["i-old"] = "terminated"  # (EC2 keeps the association in this fake until told)

    # When the sweeper takes the address back
    sweep = AddressSweep(
        owner=OWNER,
        addresses=stack.ec2,
        clock=stack.clock,
        metrics=FakeMetrics(),
        grace=timedelta(minutes=10),
        waker=LineWaker(owner=OWNER, lines=stack.lines, records=stack.records, queues=stack.queues),
    )
    assert sweep(AMPLE).returned == 1

    # Then the first launch in line is woken, and its look claims the address
    woken = [sent.message for sent in stack.queues.take()]
    assert [(message.record_id, message.wake) for message in woken] == [(first.id, True)]
    assert stack.engine.handle(woken[0]) is Handled.RAN
    assert stack.ec2.eips[pooled].instance_id == "i-first"
