"""A pool address refusal told to the pool's line (PoolRefusals) may be the instance's, not the address's: a policy
on the instance's tags, a subnet without an internet gateway, a denial while IAM propagates. Told to every launch
of the line for REFUSED_FOR (10 min) after its last refusal, such a refusal kept the waiters behind the first from
counting the pool's good addresses free, and a release from waking them, long after the launch refused had met its
policy: a launch refused every association swept its whole pool two addresses a look, each refusal told again at
every look, and the pool stayed so until ten minutes after its last. Now: a launch refused more addresses than one
look tries is not believed alone (another launch refused the same address is), a launch whose policy decides on
its refusals takes back what it told, and an address associated after its refusal (the denial was IAM's, the
condition on its tags since changed) is told refused no more."""

from __future__ import annotations

from datetime import datetime, timedelta

from nodecycle.domain.eip.line import PoolRefusals, line_key
from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.policy import ActionResult
from tests.support.fakes import FakeMetrics
from tests.unit.eip.fakes import OWNER, T0, FakeAddresses, Wiring, launch_record, refusing
from tests.unit.eip.test_assign_address import POOL, after, step
from tests.unit.eip.test_line_refused_addresses import line_waker

REFUSED = "i-0000000000bad0001"  # EC2 refuses every association to it: its own sake (a policy on its tags)
FIRST = "i-0000000000000f1r5"
SECOND = "i-00000000000000sec"
ELSEWHERE = "i-0000000000000e15e"


def looks(
    assign: object, record: LifecycleRecord, now: datetime, most: int
) -> tuple[LifecycleRecord, datetime]:
    """The launch's looks, each when due, up to ``most`` or until it asks to run no more; its last record (the
    outcome's changes in it) and when its last look ran."""
    for _ in range(most):
        outcome = assign(record, now)  # type: ignore[operator]
        record = after(record, outcome)
        if not outcome.again:
            break
        now += timedelta(seconds=outcome.delay or 0)
    return record, now


def told(wiring: Wiring, now: datetime) -> frozenset[str]:
    return PoolRefusals(wiring.lines, line_key(OWNER, POOL)).read(now)


def test_a_launch_refused_for_its_own_sake_leaves_its_pool_counted_free_once_its_policy_decided() -> None:
    # Given a pool of two free addresses, and a launch EC2 refuses every association to
    ec2 = FakeAddresses()
    for instance in (REFUSED, FIRST, SECOND, ELSEWHERE):
        ec2.launch(instance)
    pool = [ec2.add(pool=POOL, allocated_at=None) for _ in range(2)]
    refusing(ec2, {"*"}, "UnauthorizedOperation", to=REFUSED)
    wiring = Wiring()
    assign = step(
        ec2, FakeMetrics(), wiring, eip_mode="pool", eip_pool_name=POOL, eip_failure_policy="abandon"
    )
    ended, at = looks(assign, launch_record(REFUSED), T0, 10)
    assert ended.result is ActionResult.ABANDON

    # When, its policy decided, both addresses are taken, two launches wait in line, and both are given back
    for allocation_id in pool:
        ec2.take(allocation_id, ELSEWHERE)
    for instance in (FIRST, SECOND):
        assert assign(launch_record(instance, at), at).again
    for allocation_id in pool:
        ec2.eips[allocation_id].instance_id = ec2.eips[allocation_id].association_id = None
    waker, queues = line_waker(wiring, ec2)
    waker.given_back({POOL: 1}, at + timedelta(seconds=5))

    # Then both waiters are woken, for the two addresses free: the refusals were the instance's, told no more
    assert told(wiring, at + timedelta(seconds=5)) == frozenset()
    assert len(queues.sent) == 2


def test_a_launch_refused_more_addresses_than_a_look_tries_is_not_believed_alone() -> None:
    # Given a pool of six free addresses, and a launch EC2 refuses every association to
    ec2 = FakeAddresses()
    ec2.launch(REFUSED)
    for _ in range(6):
        ec2.add(pool=POOL, allocated_at=None)
    refusing(ec2, {"*"}, "UnauthorizedOperation", to=REFUSED)
    wiring = Wiring()
    assign = step(
        ec2, FakeMetrics(), wiring, eip_mode="pool", eip_pool_name=POOL, eip_failure_policy="abandon"
    )

    # When it has looked twice (refused two addresses at each look)
    record, at = looks(assign, launch_record(REFUSED), T0, 2)
    assert len(record.extra["eip"]["refused_addresses"]) == 4

    # Then none of them is told refused to the line: only it was refused them, more than a look tries
    assert told(wiring, at) == frozenset()


def test_an_address_taken_after_its_refusal_is_told_refused_no_more() -> None:
    # Given a pool of one free address, and a launch refused it once (a denial while IAM propagates)
    ec2 = FakeAddresses()
    ec2.launch(FIRST)
    only = ec2.add(pool=POOL, allocated_at=None)
    refusing(ec2, {"*"}, "UnauthorizedOperation", to=FIRST, times=1)
    wiring = Wiring()
    assign = step(
        ec2, FakeMetrics(), wiring, eip_mode="pool", eip_pool_name=POOL, eip_failure_policy="abandon"
    )

    # When its launch goes on, and takes it at a later look
    _, at = looks(assign, launch_record(FIRST), T0, 10)
    assert ec2.eips[only].instance_id == FIRST

    # Then the address is told refused no more (given back, it counts free for the launches of the line)
    assert told(wiring, at) == frozenset()


def test_an_address_told_refused_whose_denial_was_lifted_is_told_so_no_more_once_taken() -> None:
    # Given a launch waiting first in a pool's line, and the pool's one free address told refused by two launches
    # (a condition on its tags), the condition changed since
    ec2 = FakeAddresses()
    for instance in (FIRST, ELSEWHERE):
        ec2.launch(instance)
    lifted = ec2.add(pool=POOL, allocated_at=None, on=ELSEWHERE)
    wiring = Wiring()
    assign = step(ec2, FakeMetrics(), wiring, eip_mode="pool", eip_pool_name=POOL, eip_wait_seconds=600)
    first = launch_record(FIRST)
    outcome = assign(first, T0)
    assert outcome.again
    first = after(first, outcome)
    PoolRefusals(wiring.lines, line_key(OWNER, POOL)).add([lifted], "i-00000000000other1", T0)
    PoolRefusals(wiring.lines, line_key(OWNER, POOL)).add([lifted], "i-00000000000other2", T0)
    ec2.eips[lifted].instance_id = ec2.eips[lifted].association_id = None
    assert told(wiring, T0 + timedelta(seconds=15)) == {lifted}

    # When the first in line looks (it tries an address told refused, last) and takes it
    assign(first, T0 + timedelta(seconds=15))
    assert ec2.eips[lifted].instance_id == FIRST

    # Then the address is told refused no more: given back, it counts free for the launches of the line
    assert told(wiring, T0 + timedelta(seconds=15)) == frozenset()
