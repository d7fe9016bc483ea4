"""A launch leaving a line without an address (its instance gone, its wait over) wakes the next launch in it, as
an address given back does (nodecycle.domain.eip.wake): the next may be first now, and an address free for it
(the one the launch leaving was woken for). Otherwise it waits for its own look: up to a minute for one that
was not first in line."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.engine import Handled
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import Step
from nodecycle.domain.policy import EipMode
from tests.support.fakes import Sent
from tests.unit.eip.fakes import terminate_record
from tests.unit.eip.test_line_wake import Stack, a_pool_of_one_on


def wakes(stack: Stack) -> list[Sent]:
    """The wake-ups sent since the last look at the queues."""
    return [sent for sent in stack.queues.take() if sent.message.wake]


def sent_to(woken: list[Sent]) -> list[tuple[Worker, str, int]]:
    return [(sent.worker, sent.message.record_id, sent.delay) for sent in woken]


def test_a_launch_woken_for_an_address_whose_instance_is_gone_wakes_the_next_launch_in_line() -> None:
    # Given a pool of one address on an old instance, and two launches in line for it
    stack = Stack(EipMode.POOL)
    pooled = a_pool_of_one_on(stack, "i-old")
    first = stack.launch_waiting("i-first")
    stack.clock.advance(5)
    second = stack.launch_waiting("i-second")
    stack.queues.take()
    # And the old instance's terminate gives the address back, waking the first
    leaving = terminate_record("i-old", at=stack.clock.now(), step=Step.RELEASE_EIP)
    assert stack.records.create(leaving)
    stack.run(leaving)
    (wake,) = [sent.message for sent in stack.queues.take() if sent.message.record_id == first.id]

    # When the first launch's instance is terminated before its wake-up runs
    stack.ec2.instances["i-first"] = "terminated"
    assert stack.engine.handle(wake) in (Handled.RAN, Handled.DONE)
    stored = stack.records.get(first.id)
    assert stored is not None
    assert stored.outcome == "instance-gone"

    # Then the second launch, first now, is sent its look at once, and that look takes the address
    woken = wakes(stack)
    assert sent_to(woken) == [(Worker.EIP, second.id, 0)]
    assert stack.engine.handle(woken[0].message) in (Handled.RAN, Handled.DONE)
    assert stack.ec2.eips[pooled].instance_id == "i-second"


def test_a_launch_leaving_the_line_at_the_end_of_its_wait_wakes_the_next_launch_in_line() -> None:
    # Given allocate mode, the quota used up, and two launches waiting for it, the first near the end of its wait
    stack = Stack(EipMode.ALLOCATE)
    stack.ec2.launch("i-old")
    stack.ec2.add(allocated_for="i-old", on="i-old")
    first = stack.launch_waiting("i-first")
    stack.clock.advance(5)
    second = stack.launch_waiting("i-second")
    stack.queues.take()

    # When the first launch's wait ends (its look fails it: abandoned, out of the line)
    stack.clock.advance(timedelta(minutes=10).total_seconds() - 5)  # (the second's wait goes on)
    assert stack.run(first) in (Handled.RAN, Handled.DONE)
    stored = stack.records.get(first.id)
    assert stored is not None
    assert (stored.outcome or "").startswith("eip-failed")
    assert stack.lines.waiting() == ["i-second"]

    # Then the second launch, first now, is sent its look at once
    assert sent_to(wakes(stack)) == [(Worker.EIP, second.id, 0)]
