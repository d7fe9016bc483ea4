"""A launch that finds the pool empty and joins its line as the address comes back: its look listed the pool
before the disassociation, and the release read the line (to wake its first waiter) before the launch joined
it. No one is woken, and the launch, first in line, would wait its 15 s with the address free. A launch that
has just joined the line lists the pool again: an address free since is looked at again at once."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.eip.assign import FIRST_IN_LINE_DELAY
from nodecycle.domain.engine import Handled
from nodecycle.domain.model import Step
from nodecycle.domain.policy import EipMode
from tests.unit.eip.fakes import launch_record, terminate_record
from tests.unit.eip.test_line_wake import Stack, a_pool_of_one_on


def test_a_launch_joining_the_line_as_an_address_comes_back_looks_again_at_once_and_takes_it() -> None:
    # Given a pool of one address on an old instance, and no launch waiting
    stack = Stack(EipMode.POOL)
    pooled = a_pool_of_one_on(stack, "i-old")
    launch = launch_record(stack.ec2.launch("i-new"), at=stack.clock.now())
    assert stack.records.create(launch)

    # When the old instance's terminate gives the address back while the new launch's first look runs: after it
    # listed the pool (the address on i-old), before it joins the line
    leaving = terminate_record("i-old", at=stack.clock.now(), step=Step.RELEASE_EIP)
    assert stack.records.create(leaving)
    stack.ec2.after["find"] = lambda *_: stack.run(leaving)
    assert stack.run(launch) is Handled.RAN
    assert stack.step(leaving) is not Step.RELEASE_EIP
    assert stack.lines.waiting() == ["i-new"]
    assert [
        sent.message.record_id for sent in stack.queues.take() if sent.message.wake
    ] == []  # (none in line)

    # Then the launch looks again at once (not 15 s on), and that look takes the address
    waiting = stack.records.get(launch.id)
    assert waiting is not None
    assert waiting.step is Step.ASSIGN_EIP
    assert waiting.due_at - waiting.updated_at < timedelta(seconds=FIRST_IN_LINE_DELAY)
    stack.clock.advance((waiting.due_at - waiting.updated_at).total_seconds())
    stack.run(launch)
    assert stack.ec2.eips[pooled].instance_id == "i-new"


def test_a_launch_joining_the_line_of_a_pool_still_empty_waits_its_15_s() -> None:
    # Given a pool of one address on an old instance, When a new launch finds it empty and joins the line
    stack = Stack(EipMode.POOL)
    a_pool_of_one_on(stack, "i-old")
    stack.launch_waiting("i-new")

    # Then it looks again in 15 s, as the first in line does (the second listing found nothing free)
    (look,) = stack.queues.take()
    assert look.delay == FIRST_IN_LINE_DELAY
