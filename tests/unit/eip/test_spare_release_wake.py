"""A spare address that ASSIGN_EIP releases (a launch that ended up with more than one allocated for it, or whose
instance went) makes room under the quota: it wakes the first launch waiting for the quota, as an address that
RELEASE_EIP releases does (nodecycle.domain.eip.wake), rather than leave it to that launch's own look."""

from __future__ import annotations

from nodecycle.domain.engine import Handled
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import Step
from nodecycle.domain.policy import EipMode
from tests.unit.eip.fakes import launch_record
from tests.unit.eip.test_line_leave_wake import sent_to, wakes
from tests.unit.eip.test_line_wake import Stack


def test_a_spare_address_that_assign_eip_releases_wakes_the_first_launch_waiting_for_the_quota() -> None:
    # Given allocate mode, a quota of two used up by a launch that ended up with two addresses allocated for
    # it (two deliveries of its message each allocated one), and a launch waiting for the quota
    stack = Stack(EipMode.ALLOCATE)
    stack.ec2.quota = 2
    stack.ec2.launch("i-twice")
    stack.ec2.add(allocated_for="i-twice", on="i-twice")
    spare = stack.ec2.add(allocated_for="i-twice")
    waiting = stack.launch_waiting("i-waiting")
    stack.queues.take()

    # When the launch's next run finds its address held and releases the spare
    twice = launch_record("i-twice", at=stack.clock.now())
    assert stack.records.create(twice)
    assert stack.run(twice) is Handled.RAN
    assert spare not in stack.ec2.eips

    # Then the waiting launch is sent its look at once, and that look allocates an address
    woken = wakes(stack)
    assert sent_to(woken) == [(Worker.EIP, waiting.id, 0)]
    assert stack.engine.handle(woken[0].message) in (Handled.RAN, Handled.DONE)
    assert len(stack.ec2.on("i-waiting")) == 1
    assert stack.step(twice) is not Step.ASSIGN_EIP
