"""An address given back wakes the first launches in line that wait for one; not one that left waiting to associate
an address it allocated itself (room under the quota came back to it), which EC2 may not know yet: woken, it tried
that address again early, a try of the minute its allocation is given to show (see assign.verify_delay) spent on a
wake-up, and the launch behind it, which the address was given back for, was not woken."""

from __future__ import annotations

from nodecycle.domain.eip.assign import verify_delay
from nodecycle.domain.engine import Handled
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.policy import EipMode
from nodecycle.domain.ports.addresses import AddressNotFound
from nodecycle.domain.ports.lifecycle import WorkMessage
from tests.unit.eip.fakes import FakeAddresses, terminate_record
from tests.unit.eip.test_line_wake import Stack


def released(stack: Stack, instance: str) -> list[WorkMessage]:
    """Run the terminate of ``instance``'s RELEASE_EIP until its address is released; the wake-ups it sent."""
    leaving = terminate_record(instance, at=stack.clock.now(), step=Step.RELEASE_EIP)
    assert stack.records.create(leaving)
    woken: list[WorkMessage] = []
    while _step(stack, leaving) is Step.RELEASE_EIP:
        stack.run(leaving)
        woken += [sent.message for sent in stack.queues.take() if sent.message.record_id != leaving.id]
        stack.clock.advance(3)
    assert not stack.ec2.on(instance)
    return woken


def _step(stack: Stack, record: LifecycleRecord) -> Step:
    stored = stack.records.get(record.id)
    assert stored is not None
    return stored.step


def test_an_address_given_back_wakes_the_next_waiter_not_one_associating_an_address_it_allocated() -> None:
    # Given a quota of two addresses, both on old instances, and two launches waiting for room in its line
    stack = Stack(EipMode.ALLOCATE, ec2=FakeAddresses(quota=2))
    for old in ("i-old-1", "i-old-2"):
        stack.ec2.launch(old)
        stack.ec2.add(allocated_for=old, on=old)
    first = stack.launch_waiting("i-first")
    stack.clock.advance(5)
    later = stack.launch_waiting("i-later")
    stack.queues.take()

    # And the first, woken by the room the first old instance's release made, allocated an address EC2 does not
    # know yet at its association (eventually consistent): it tries it again in a while
    (wake,) = released(stack, "i-old-1")
    assert (wake.record_id, wake.wake) == (first.id, True)
    stack.ec2.faults["associate"].append(AddressNotFound("InvalidAllocationID.NotFound"))
    assert stack.engine.handle(wake) is Handled.RAN
    waiting = stack.records.get(first.id)
    assert waiting is not None
    assert waiting.step is Step.ASSIGN_EIP
    assert (waiting.due_at - stack.clock.now()).total_seconds() == verify_delay(1)
    assert len(stack.ec2.eips) == 2  # (the second old instance's, and the one it allocated)
    stack.queues.take()

    # When the second old instance's release makes room again
    woken = released(stack, "i-old-2")

    # Then the launch behind it is woken for it, and the first is left to its own try
    assert [(message.record_id, message.wake) for message in woken] == [(later.id, True)]
