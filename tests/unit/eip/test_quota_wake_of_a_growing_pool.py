"""A pool that may grow (EipPoolAllocateWhenEmpty) has its launches wait for the account's quota in the pool's
line: an address released under the quota is room for the first of them. RELEASE_EIP (or the sweep) that
releases one (an address allocated for its instance before the stack went from allocate mode to pool mode, say)
wakes the first launch of that line, not only the line of allocate mode's launches, which is empty then."""

from __future__ import annotations

from nodecycle.domain.engine import Handled
from nodecycle.domain.model import Step
from nodecycle.domain.policy import EipMode
from nodecycle.domain.ports.addresses import POOL_TAG
from tests.unit.eip.fakes import terminate_record
from tests.unit.eip.test_line_wake import Stack


def test_an_address_released_under_the_quota_wakes_the_first_launch_waiting_to_grow_the_pool() -> None:
    # Given a pool that may grow, empty, and the account's quota of one address used by an old instance's address
    # of allocate mode; a launch waiting in the pool's line for the quota
    stack = Stack(EipMode.POOL, grow_pool=True)
    stack.ec2.launch("i-old")
    stack.ec2.add(allocated_for="i-old", on="i-old")
    waiting = stack.launch_waiting("i-waiting")
    assert stack.lines.waiting() == ["i-waiting"]
    stack.queues.take()

    # When the old instance's terminate releases its address
    leaving = terminate_record("i-old", at=stack.clock.now(), step=Step.RELEASE_EIP)
    assert stack.records.create(leaving)
    stack.ec2.settling = 0
    stack.run(leaving)
    assert stack.ec2.eips == {}

    # Then the waiting launch is woken, and its look grows the pool by an address and takes it
    woken = [sent.message for sent in stack.queues.take() if sent.message.wake]
    assert [message.record_id for message in woken] == [waiting.id]
    assert stack.engine.handle(woken[0]) in (Handled.RAN, Handled.DONE)
    (held,) = stack.ec2.on("i-waiting")
    assert held.tags[POOL_TAG] == "ci"
