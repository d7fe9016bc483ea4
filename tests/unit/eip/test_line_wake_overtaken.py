"""A wake-up overtaken by the waiter's own look: the look listed the pool before the address came back, and
committed "wait again" after the release read its record to wake it. The wake-up then carries a ``seq`` the
look moved on; run as an old message (a watch), it was lost, and the address idled until the waiter's next look
(15 s first in line) though it was free. The engine runs it at the record's current ``seq`` while the record
still waits in line at ASSIGN_EIP, as it runs an overtaken budget wake-up (nodecycle.domain.engine)."""

from __future__ import annotations

from nodecycle.domain.engine import Handled
from nodecycle.domain.model import Step
from nodecycle.domain.policy import EipMode
from tests.unit.eip.fakes import terminate_record
from tests.unit.eip.test_line_wake import Stack, a_pool_of_one_on


def test_a_wake_up_overtaken_by_the_waiters_own_look_still_claims_the_address_given_back() -> None:
    # Given a pool of one address on an old instance, and a launch waiting first in line
    stack = Stack(EipMode.POOL)
    pooled = a_pool_of_one_on(stack, "i-old")
    first = stack.launch_waiting("i-first")
    (own_look,) = stack.queues.take()
    stack.clock.advance(own_look.delay)

    # When the old instance's terminate gives the address back while the waiter's own look runs: after that look
    # listed the pool (the address still on i-old), before it commits that it waits again
    leaving = terminate_record("i-old", at=stack.clock.now(), step=Step.RELEASE_EIP)
    assert stack.records.create(leaving)
    stack.ec2.after["find"] = lambda *_: stack.run(leaving)
    assert stack.engine.handle(own_look.message) is Handled.RAN
    assert stack.step(leaving) is not Step.RELEASE_EIP
    assert stack.ec2.eips[pooled].instance_id is None  # (given back, and free)
    waiting = stack.records.get(first.id)
    assert waiting is not None
    (wake,) = [sent.message for sent in stack.queues.take() if sent.message.wake]
    assert (wake.record_id, wake.seq) == (first.id, waiting.seq - 1)  # (read before the look's commit)

    # Then the wake-up, delivered now, still runs the waiter's look, which claims the address
    assert stack.engine.handle(wake) is Handled.RAN
    assert stack.ec2.eips[pooled].instance_id == "i-first"
    assert stack.step(first) is not Step.ASSIGN_EIP


def test_a_wake_up_that_comes_again_after_the_waiter_claimed_runs_nothing() -> None:
    # Given a launch first in line woken by an address given back, whose wake-up ran and claimed it
    stack = Stack(EipMode.POOL)
    pooled = a_pool_of_one_on(stack, "i-old")
    first = stack.launch_waiting("i-first")
    stack.queues.take()
    leaving = terminate_record("i-old", at=stack.clock.now(), step=Step.RELEASE_EIP)
    assert stack.records.create(leaving)
    stack.run(leaving)
    (wake,) = [sent.message for sent in stack.queues.take() if sent.message.wake]
    assert stack.engine.handle(wake) is Handled.RAN
    claimed = stack.records.get(first.id)
    assert claimed is not None
    calls = len(stack.ec2.calls)

    # When SQS delivers the wake-up again
    assert stack.engine.handle(wake) is Handled.WATCHING

    # Then nothing ran: no call to EC2, the record as it was
    assert stack.ec2.calls[calls:] == []
    assert stack.records.get(first.id) == claimed
    assert stack.ec2.eips[pooled].instance_id == "i-first"
