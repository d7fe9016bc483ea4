"""Wake-ups of a pool's line where they could go wrong: another owner's line in the same account (invariant 3),
a wake-up of a launch that is not first (a duplicate, or one overtaken and run at the record's current seq), and
one for a launch whose lifecycle is over. A wake-up only brings a look forward: the look keeps the line's order
and takes nothing of another owner's."""

from __future__ import annotations

from nodecycle.domain.engine import Handled
from nodecycle.domain.model import Step
from nodecycle.domain.policy import EipMode
from nodecycle.domain.ports.lifecycle import WorkMessage
from tests.unit.eip.fakes import FakeAddresses, launch_record, terminate_record
from tests.unit.eip.test_line_wake import Stack, a_pool_of_one_on

OTHER = "stack-b"


def test_an_address_given_back_wakes_only_its_owners_line_and_goes_to_no_other_owners_launch() -> None:
    # Given two stacks in one account (one EC2, a table and queues each), each with a pool named "ci" of one
    # address on an old instance, and a launch of each waiting in its own line
    ec2 = FakeAddresses(quota=5)
    mine, theirs = Stack(EipMode.POOL, ec2=ec2), Stack(EipMode.POOL, ec2=ec2, owner=OTHER)
    pooled = a_pool_of_one_on(mine, "i-old")
    ec2.launch("i-old-b")
    their_pooled = ec2.add(owner=OTHER, pool="ci", on="i-old-b")
    waiting = mine.launch_waiting("i-mine")
    their_launch = launch_record(ec2.launch("i-theirs"), at=theirs.clock.now(), owner=OTHER)
    assert theirs.records.create(their_launch)
    theirs.run(their_launch)
    assert theirs.step(their_launch) is Step.ASSIGN_EIP
    mine.queues.take()
    theirs.queues.take()

    # When my old instance's terminate gives my address back
    leaving = terminate_record("i-old", at=mine.clock.now(), step=Step.RELEASE_EIP)
    assert mine.records.create(leaving)
    mine.run(leaving)

    # Then only my launch is woken, and takes it; the other stack's launch is not woken, and its own look leaves
    # my address (and its own, on its old instance) where they are
    (wake,) = [sent.message for sent in mine.queues.take() if sent.message.wake]
    assert wake.record_id == waiting.id
    assert theirs.queues.take() == []
    mine.engine.handle(wake)
    assert ec2.eips[pooled].instance_id == "i-mine"
    theirs.clock.advance(60)
    theirs.run(their_launch)
    assert theirs.step(their_launch) is Step.ASSIGN_EIP
    assert ec2.eips[their_pooled].instance_id == "i-old-b"
    assert ec2.eips[pooled].instance_id == "i-mine"


def test_a_wake_up_of_a_launch_behind_in_line_runs_its_look_which_leaves_the_address_to_the_first() -> None:
    # Given a pool of one address on an old instance, two launches in line, and a wake-up of the second one at an
    # older seq (a duplicate of an earlier one, delivered late: its record's seq has moved since)
    stack = Stack(EipMode.POOL)
    pooled = a_pool_of_one_on(stack, "i-old")
    first = stack.launch_waiting("i-first")
    stack.clock.advance(5)
    second = stack.launch_waiting("i-second")
    stored = stack.records.get(second.id)
    assert stored is not None
    late = WorkMessage(
        record_id=second.id, seq=stored.seq - 1, step=Step.ASSIGN_EIP, wake=True, token=second.token
    )
    stack.queues.take()
    stack.clock.advance(1)
    leaving = terminate_record("i-old", at=stack.clock.now(), step=Step.RELEASE_EIP)
    assert stack.records.create(leaving)
    stack.run(leaving)
    (wake,) = [sent.message for sent in stack.queues.take() if sent.message.wake]
    assert wake.record_id == first.id

    # When the second launch's late wake-up runs before the first's
    assert stack.engine.handle(late) is Handled.RAN

    # Then the second launch looked (at its record's current seq) and left the address to the first, in line
    assert stack.ec2.eips[pooled].instance_id is None
    assert stack.step(second) is Step.ASSIGN_EIP
    assert stack.lines.waiting() == ["i-first", "i-second"]
    # And the first launch's wake-up takes it
    stack.engine.handle(wake)
    assert stack.ec2.eips[pooled].instance_id == "i-first"


def test_a_wake_up_of_a_launch_whose_lifecycle_is_over_runs_nothing() -> None:
    # Given a pool of one address on an old instance, and a launch woken for it whose lifecycle ended meanwhile
    stack = Stack(EipMode.POOL)
    pooled = a_pool_of_one_on(stack, "i-old")
    first = stack.launch_waiting("i-first")
    stack.queues.take()
    leaving = terminate_record("i-old", at=stack.clock.now(), step=Step.RELEASE_EIP)
    assert stack.records.create(leaving)
    stack.run(leaving)
    (wake,) = [sent.message for sent in stack.queues.take() if sent.message.wake]
    stored = stack.records.get(first.id)
    assert stored is not None
    assert stack.records.commit(stored.model_copy(update={"step": Step.DONE}), stored.seq)
    calls = len(stack.ec2.calls)

    # When the wake-up comes, Then nothing runs: no call to EC2, the address free for the next launch
    assert stack.engine.handle(wake) is Handled.FINISHED
    assert stack.ec2.calls[calls:] == []
    assert stack.ec2.eips[pooled].instance_id is None
