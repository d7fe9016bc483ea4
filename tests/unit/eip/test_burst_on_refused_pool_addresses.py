"""A burst of launches on a pool some of whose free addresses EC2 refuses to every instance (a condition on their
tags). The line's told refusals were read only while launches waited in it, and a launch with no one ahead tried
them all the same: in a burst none waits yet (the refused addresses count free), so each launch past the good
addresses tried each refused one, one refused AssociateAddress and an EipFailure each (measured on these fakes:
300 launches, 100 good and 20 refused addresses, each held a minute: 2,437 refused calls, 3,639 EipFailures). The
refusals are read at every look with free addresses now, and a launch new to them finds none but addresses refused
to two launches or more: it waits in line as for an empty pool, and tries them last once first in line.
Measured with a simulation of this test's kind (launches, good and refused addresses, each held a minute): 100, 30,
10: 651 refused calls, 971 EipFailures, 40 abandoned -> 48, 68, none; 300, 100, 20: 2,437, 3,639 -> 96, 134 (none
abandoned either way); each launch's wait for its address unchanged."""

from __future__ import annotations

import heapq
from datetime import datetime, timedelta

from nodecycle.domain.eip.line import PoolRefusals, line_key
from nodecycle.domain.eip.wake import LineWaker
from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.ports.addresses import AddressRefused
from tests.support.fakes import FakeMetrics, RecordingQueues
from tests.unit.eip.fakes import OWNER, T0, AsTheEngineRuns, FakeAddresses, Wiring, launch_record, refusing
from tests.unit.eip.test_assign_address import POOL, after, step
from tests.unit.eip.test_line_refused_addresses import line_waker

LAUNCHES, GOOD, REFUSED = 100, 30, 10
HOLD = timedelta(minutes=1)  # each instance gives its address back a minute after it got it (a refresh)


def test_a_burst_asks_ec2_for_each_refused_address_a_few_times_not_once_per_launch() -> None:
    # Given a pool of 30 good and 10 refused free addresses, and 100 launches at once
    ec2 = FakeAddresses(quota=1_000)
    addresses = [ec2.add(pool=POOL, allocated_at=None) for _ in range(GOOD + REFUSED)]
    refusing(ec2, set(addresses[GOOD:]), "UnauthorizedOperation")
    refused_calls: list[str] = []
    associate = ec2.associate

    def counted(allocation_id: str, instance_id: str) -> str:
        try:
            return associate(allocation_id, instance_id)
        except AddressRefused:
            refused_calls.append(allocation_id)
            raise

    ec2.associate = counted  # type: ignore[method-assign]
    wiring, metrics = Wiring(), FakeMetrics()
    assign = step(ec2, metrics, wiring, eip_mode="pool", eip_pool_name=POOL, eip_wait_seconds=1800)
    waker, queues = line_waker(wiring, ec2)

    # When they run, each look when due, each woken when an address is given back
    got = burst(assign, ec2, waker, queues)

    # Then every launch gets a good address as they come back (none abandoned: the launches that found none but
    # refused addresses waited in line), and EC2 is asked for each refused address a few times, not by every launch
    # (before: 651 refused calls, 971 EipFailures, 40 launches abandoned)
    assert len(got) == LAUNCHES
    assert max(got.values()) <= 4 * HOLD
    assert len(refused_calls) <= 6 * REFUSED, len(refused_calls)
    assert metrics.counts["EipFailures"] <= 9 * REFUSED


def burst(
    assign: AsTheEngineRuns, ec2: FakeAddresses, waker: LineWaker, queues: RecordingQueues
) -> dict[str, timedelta]:
    """The launches' looks in time order (a wake-up runs the woken launch at once; a look made stale by another
    run of its launch is dropped, as the engine drops a message of an old seq); when each got its address."""
    due: list[tuple[datetime, int, str, int, LifecycleRecord]] = []
    runs: dict[str, int] = {}
    latest: dict[str, LifecycleRecord] = {}
    for n in range(LAUNCHES):
        record = launch_record(ec2.launch(f"i-{n + 1:017x}"))
        heapq.heappush(due, (T0, n, "look", 0, record))
    got: dict[str, timedelta] = {}
    order = LAUNCHES
    while due:
        now, _, kind, run, record = heapq.heappop(due)
        if kind == "give-back":
            ec2.terminate(record.instance_id)
            waker.given_back({POOL: 1}, now)
            for sent in queues.take():
                woken = latest.get(sent.message.record_id)
                if woken is not None:
                    order += 1
                    heapq.heappush(due, (now, order, "look", runs[woken.id], woken))
            continue
        if runs.get(record.id, 0) != run:
            continue
        runs[record.id] = run + 1
        outcome = assign(record, now)
        record = after(record, outcome)
        order += 1
        if outcome.again:
            latest[record.id] = record
            heapq.heappush(due, (now + timedelta(seconds=outcome.delay or 0), order, "look", run + 1, record))
            continue
        latest.pop(record.id, None)
        if outcome.changes.get("allocation_id"):  # (not one that went on without: its policy)
            got[record.instance_id] = now - T0
        heapq.heappush(due, (now + HOLD, order, "give-back", 0, record))
    return got


def test_an_address_told_refused_wrongly_comes_back_at_the_next_look_of_the_launch_waiting_for_it() -> None:
    # Given a pool whose one free address two launches were refused (a condition on its tags, lifted since)
    ec2 = FakeAddresses()
    only = ec2.add(pool=POOL, allocated_at=None)
    wiring = Wiring()
    for refused_to in ("i-00000000000other1", "i-00000000000other2"):
        PoolRefusals(wiring.lines, line_key(OWNER, POOL)).add([only], refused_to, T0)
    assign = step(ec2, FakeMetrics(), wiring, eip_mode="pool", eip_pool_name=POOL, eip_wait_seconds=600)
    record = launch_record(ec2.launch("i-0000000000000new1"))

    # When a new launch looks: it waits in line, asking EC2 nothing
    outcome = assign(record, T0)
    assert outcome.again
    assert "associate" not in ec2.calls
    assert wiring.lines.waiting() == ["i-0000000000000new1"]

    # Then at its next look, first in line, it tries the address, takes it, and it is told refused no more
    later = T0 + timedelta(seconds=outcome.delay or 0)
    outcome = assign(after(record, outcome), later)
    assert outcome.changes.get("allocation_id") == only
    assert ec2.eips[only].instance_id == "i-0000000000000new1"
    assert PoolRefusals(wiring.lines, line_key(OWNER, POOL)).read(later) == frozenset()


def test_a_good_launch_after_two_launches_refused_for_their_own_sake_waits_one_look_at_most() -> None:
    # Given a pool of two free addresses, and two launches EC2 refuses every association to (a policy on their
    # instances' tags), each refused both at its first look: both addresses are told refused to two launches
    ec2 = FakeAddresses()
    bad = [ec2.launch("i-0000000000bad0001"), ec2.launch("i-0000000000bad0002")]
    pool = {ec2.add(pool=POOL, allocated_at=None) for _ in range(2)}
    for instance in bad:
        refusing(ec2, {"*"}, "UnauthorizedOperation", to=instance)
    wiring = Wiring()
    assign = step(
        ec2, FakeMetrics(), wiring, eip_mode="pool", eip_pool_name=POOL, eip_failure_policy="abandon"
    )
    for instance in bad:
        assert assign(launch_record(instance), T0).again
    assert PoolRefusals(wiring.lines, line_key(OWNER, POOL)).read_both(T0)[1] == pool

    # When a launch EC2 refuses nothing comes: it waits in line at its first look (the addresses look refused)
    good = launch_record(ec2.launch("i-00000000000000g00d"))
    outcome = assign(good, T0)
    assert outcome.again

    # Then at its next look, first in line, it tries them and takes one: the refusals were the instances'
    later = T0 + timedelta(seconds=outcome.delay or 0)
    assert later - T0 <= timedelta(seconds=15)
    outcome = assign(after(good, outcome), later)
    assert outcome.changes.get("allocation_id") in pool
