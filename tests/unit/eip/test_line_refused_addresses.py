"""A pool address EC2 refuses for its own sake (UnauthorizedOperation, a denial by a condition on its tags) stays
free in every listing. The launches of the pool's line counted it free: a launch that came later, finding two free
addresses (that one and one given back) and one launch ahead of it, took the one given back, and the launch waiting
longest was left the address no one can take (refused at each look, then its failure policy, while it could have
waited its EipWaitSeconds); and a release woke a waiter for it, whose look found nothing to take. A refusal is told
to the line (PoolRefusals): no launch counts that address free, nor does a release waking the waiters."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.eip.wake import LineWaker
from tests.support.fakes import FakeMetrics, RecordingQueues
from tests.unit.eip.fakes import OWNER, T0, AsTheEngineRuns, FakeAddresses, Wiring, launch_record, refusing
from tests.unit.eip.test_assign_address import POOL, after, step

FIRST = "i-0000000000000f1r5"
LATER = "i-000000000000la7e2"
ELSEWHERE = "i-0000000000000e15e"


def test_a_later_launch_does_not_take_the_address_given_back_past_a_waiter_refused_the_other() -> None:
    # Given a pool of two addresses, both on other instances, and a launch waiting in its line for one
    ec2, _, assign, (locked, given) = a_pool_of_two_taken()
    first = launch_record(FIRST)
    outcome = assign(first, T0)
    assert outcome.again
    first = after(first, outcome)
    # and one of them, freed, that EC2 refuses to associate (its tags), refused to the waiter at its look
    ec2.eips[locked].instance_id = ec2.eips[locked].association_id = None
    refusing(ec2, {locked}, "UnauthorizedOperation")
    outcome = assign(first, T0 + timedelta(seconds=15))
    assert outcome.again
    first = after(first, outcome)

    # When the other is given back, and a launch comes after the waiter
    ec2.eips[given].instance_id = ec2.eips[given].association_id = None
    later = assign(launch_record(LATER, T0 + timedelta(seconds=20)), T0 + timedelta(seconds=20))

    # Then the later launch waits (one address free that a launch may take, one launch ahead of it), and the waiter
    # takes the address given back at its next look
    assert later.again
    assert ec2.eips[given].instance_id is None
    taken = assign(first, T0 + timedelta(seconds=30))
    assert taken.changes.get("allocation_id") == given
    assert ec2.eips[given].instance_id == FIRST


def test_a_release_wakes_no_waiter_for_an_address_refused_to_the_line() -> None:
    # Given two launches waiting in a pool's line, and a free address of it EC2 refused to one of them
    ec2, wiring, assign, (locked, given) = a_pool_of_two_taken()
    for instance in (FIRST, LATER):
        assert assign(launch_record(instance), T0).again
    assert wiring.lines.keep_refusals(f"{OWNER}/{POOL}", {(locked, FIRST): T0}, 0)
    ec2.eips[locked].instance_id = ec2.eips[locked].association_id = None
    waker, queues = line_waker(wiring, ec2)

    # When a release gives the other back
    ec2.eips[given].instance_id = ec2.eips[given].association_id = None
    waker.given_back({POOL: 1}, T0 + timedelta(seconds=5))

    # Then one waiter is woken, for the address it may take, not a second for the one refused
    assert len(queues.sent) == 1


def a_pool_of_two_taken() -> tuple[FakeAddresses, Wiring, AsTheEngineRuns, tuple[str, str]]:
    """EC2 with FIRST, LATER and a pool of two addresses, both on ELSEWHERE; the wiring; ASSIGN_EIP in pool mode
    (a wait of 10 min); and the two addresses."""
    ec2 = FakeAddresses()
    for instance in (FIRST, LATER, ELSEWHERE):
        ec2.launch(instance)
    pool = (
        ec2.add(pool=POOL, allocated_at=None, on=ELSEWHERE),
        ec2.add(pool=POOL, allocated_at=None, on=ELSEWHERE),
    )
    wiring = Wiring()
    assign = step(ec2, FakeMetrics(), wiring, eip_mode="pool", eip_pool_name=POOL, eip_wait_seconds=600)
    return ec2, wiring, assign, pool


def line_waker(wiring: Wiring, ec2: FakeAddresses) -> tuple[LineWaker, RecordingQueues]:
    """The waker of the lines as the eip function wires it (EC2 counting the free addresses, the refusals told),
    and the queue its wake-ups go to."""
    queues = RecordingQueues()
    waker = LineWaker(
        owner=OWNER,
        lines=wiring.lines,
        records=wiring.records,
        queues=queues,
        addresses=ec2,
        refusals=wiring.lines,
    )
    return waker, queues
