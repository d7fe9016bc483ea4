"""Pool mode when the pool is empty: the launches waiting for an address given back are served first come,
first served (see nodecycle.domain.eip.line), on the in-memory EC2 of fakes.py and an in-memory line."""

from __future__ import annotations

import heapq
from datetime import datetime, timedelta
from typing import Any

import pytest

from nodecycle.domain.eip import SCRATCH
from nodecycle.domain.eip.assign import FIRST_IN_LINE_DELAY, RECORD_LOOKS
from nodecycle.domain.eip.line import MAX_WAITERS, WRITES, Line, Waiter
from nodecycle.domain.engine import Outcome
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import LifecycleRecord, Step, record_id
from nodecycle.domain.ports.addresses import POOL_TAG, AddressRefused
from nodecycle.settings import EipSettings
from nodecycle.wiring.common import eip_policy
from tests.support.fakes import FakeMetrics
from tests.unit.eip.fakes import (
    GROUP,
    OWNER,
    T0,
    AsTheEngineRuns,
    FakeAddresses,
    FakeLines,
    Wiring,
    launch_record,
)

POOL = "ci"
WAIT = 600


def settings(**overrides: Any) -> EipSettings:
    values = {
        "owner_id": OWNER,
        "record_table": "records",
        "drain_queue_url": "https://sqs.example/drain",
        "eip_queue_url": "https://sqs.example/eip",
        "wake_queue_url": "https://sqs.example/wake",
        "managed_groups": GROUP,
        "eip_mode": "pool",
        "eip_pool_name": POOL,
        "eip_wait_seconds": WAIT,
        **overrides,
    }
    return EipSettings.model_validate(values)


def step(ec2: FakeAddresses, wiring: Wiring, metrics: FakeMetrics, **overrides: Any) -> AsTheEngineRuns:
    """ASSIGN_EIP as the eip function wires it, run as its engine runs it (each launch's record kept)."""
    return wiring.assign(ec2, metrics, eip_policy(settings(**overrides)))


def in_line(ec2: FakeAddresses, wiring: Wiring, instance: str, since: datetime) -> Waiter:
    """A launch of a running instance that has waited in the pool's line ``since`` (its lifecycle at
    ASSIGN_EIP, as stored), as the line holds it."""
    record = launch_record(ec2.launch(instance), at=since)
    waiting = {SCRATCH: {"exhausted_since": since.isoformat(), "exhausted": 1}}
    assert wiring.records.create(record.model_copy(update={"extra": waiting}))
    return Waiter(since, record.id, instance, since + timedelta(seconds=WAIT))


def after(record: LifecycleRecord, outcome: Outcome) -> LifecycleRecord:
    return record.model_copy(update=dict(outcome.changes))


def went_on(outcome: Outcome) -> bool:
    return outcome.then is None and not outcome.again and "outcome" not in outcome.changes


@pytest.fixture
def ec2() -> FakeAddresses:
    return FakeAddresses()


@pytest.fixture
def wiring() -> Wiring:
    return Wiring()


@pytest.fixture
def lines(wiring: Wiring) -> FakeLines:
    return wiring.lines


def test_in_a_refresh_no_waiter_is_abandoned_while_new_launches_take_the_addresses_given_back(
    ec2: FakeAddresses, lines: FakeLines, wiring: Wiring
) -> None:
    # Given a pool of one address, on an old instance, and a replacement that finds the pool empty at T0
    ec2.add(pool=POOL, on=ec2.launch("i-old"))
    metrics = FakeMetrics()
    assign = step(ec2, wiring, metrics, eip_failure_policy="abandon")
    # (time, order, what, instance): a launch's next look, or an address given back
    events: list[tuple[datetime, int, str, str]] = [(T0, 0, "look", ec2.launch("i-new-00"))]
    records = {"i-new-00": launch_record("i-new-00", at=T0)}
    # And, every 110 s, the instance holding the address terminates (its address given back) and, at that very
    # moment, the next replacement launches and looks at once (an instance refresh, one at a time)
    for k in range(1, 10):
        events.append((T0 + timedelta(seconds=110 * k), k, "return", f"i-new-{k:02d}" if k < 9 else ""))
    heapq.heapify(events)
    ended: dict[str, Outcome] = {}
    given_back: list[datetime] = []

    # When every look runs at its time
    order = 10
    while events:
        now, _, what, instance = heapq.heappop(events)
        if what == "return":
            for holder in [eip.instance_id for eip in ec2.eips.values() if eip.instance_id]:
                ec2.terminate(holder)
                given_back.append(now)
            if instance:
                records[ec2.launch(instance)] = launch_record(instance, at=now)
                heapq.heappush(events, (now, order, "look", instance))
                order += 1
            continue
        if ec2.instances[instance] != "running":
            continue
        outcome = assign(records[instance], now)
        records[instance] = after(records[instance], outcome)
        if outcome.again:
            heapq.heappush(events, (now + timedelta(seconds=outcome.delay), order, "look", instance))
            order += 1
        else:
            ended[instance] = outcome

    # Then no launch was abandoned while addresses were given back: each waited its turn and got one
    abandoned = {i: o.changes["outcome"] for i, o in ended.items() if o.then is Step.COMPLETE}
    assert len(given_back) >= 6
    assert abandoned == {}
    assert sorted(ended) == [f"i-new-{k:02d}" for k in range(9)]
    assert all(went_on(outcome) for outcome in ended.values())
    # And the line is left empty
    assert lines.waiting() == []


def test_a_wait_for_an_address_is_bounded_in_all_even_when_the_assignment_starts_over(
    ec2: FakeAddresses, lines: FakeLines, wiring: Wiring
) -> None:
    # Given a launch that has waited most of its EipWaitSeconds for the pool's one address
    held = ec2.add(pool=POOL, on=ec2.launch("i-old"))
    waiting = ec2.launch("i-waiting")
    assign = step(ec2, wiring, FakeMetrics(), eip_failure_policy="abandon")
    record, now = launch_record(waiting), T0
    outcome = assign(record, now)
    while now < T0 + timedelta(seconds=500):
        record, now = after(record, outcome), now + timedelta(seconds=outcome.delay)
        outcome = assign(record, now)
        assert outcome.again
    # When the address is given back, and an operator associates it by hand elsewhere right after the launch's
    # association (the verification sees it there: the assignment starts over), and the pool stays empty
    ec2.terminate("i-old")
    ec2.before["describe"] = lambda allocation_id: ec2.take(allocation_id, "i-by-hand")
    while outcome.again:
        record, now = after(record, outcome), now + timedelta(seconds=outcome.delay)
        outcome = assign(record, now)

    # Then the launch ends as its policy says once EipWaitSeconds have passed since it first found the pool
    # empty, not EipWaitSeconds after its start over
    assert outcome.then is Step.COMPLETE
    assert "gave up" in outcome.changes["outcome"] or "empty" in outcome.changes["outcome"]
    assert ec2.eips[held].instance_id == "i-by-hand"
    assert now <= T0 + timedelta(seconds=WAIT)


def test_a_new_launch_yields_a_free_address_to_an_older_waiter_who_looks_again_first_in_line(
    ec2: FakeAddresses, lines: FakeLines, wiring: Wiring
) -> None:
    # Given a launch waiting for the pool's one address, and a second waiting behind it
    held = ec2.add(pool=POOL, on=ec2.launch("i-old"))
    assign = step(ec2, wiring, FakeMetrics())
    first, second = launch_record(ec2.launch("i-first")), launch_record(ec2.launch("i-second"))
    waited = assign(first, T0)
    behind = assign(second, T0 + timedelta(seconds=5))

    # When the address is given back and a new launch looks at once
    ec2.terminate("i-old")
    new = assign(launch_record(ec2.launch("i-new")), T0 + timedelta(seconds=10))

    # Then the new launch takes nothing and waits in line behind them; the first waiter, first in line, looks
    # again in 15 s, not in a minute, and takes the address
    assert new.again
    assert ec2.on("i-new") == []
    assert lines.waiting() == ["i-first", "i-second", "i-new"]
    assert waited.again
    assert waited.delay == 15
    assert behind.again
    assert behind.delay == 15
    taken = assign(after(first, waited), T0 + timedelta(seconds=15))
    assert went_on(taken)
    assert taken.changes["allocation_id"] == held
    assert lines.waiting() == ["i-second", "i-new"]


@pytest.mark.parametrize("stale", ["gone", "served", "past its wait"])
def test_a_waiter_that_no_longer_waits_keeps_no_address_from_the_next(
    ec2: FakeAddresses, lines: FakeLines, wiring: Wiring, stale: str
) -> None:
    # Given a waiter in line that cannot leave it (its Lambda died; its launch ended elsewhere): its instance
    # terminated, or holds an address of the pool, or its wait is over
    assign = step(ec2, wiring, FakeMetrics())
    ec2.add(pool=POOL, on=ec2.launch("i-old"))
    assert assign(launch_record(ec2.launch("i-stale")), T0).again
    if stale == "gone":
        ec2.terminate("i-stale")
    elif stale == "served":
        ec2.add(pool=POOL, on="i-stale")
    now = T0 + timedelta(seconds=WAIT + 1 if stale == "past its wait" else 30)

    # When an address is given back and a new launch looks
    free = ec2.add(pool=POOL)
    outcome = assign(launch_record(ec2.launch("i-new"), at=now), now)

    # Then the new launch takes it
    assert went_on(outcome)
    assert outcome.changes["allocation_id"] == free


def test_joining_the_line_while_another_launch_joins_keeps_both_in_their_order(
    ec2: FakeAddresses, lines: FakeLines, wiring: Wiring
) -> None:
    # Given an empty pool and a launch that joins the line the moment another, older one writes it
    ec2.add(pool=POOL, on=ec2.launch("i-old"))
    assign = step(ec2, wiring, FakeMetrics())
    older = in_line(ec2, wiring, "i-older", T0 - timedelta(seconds=1))
    lines.racing.append([older])

    # When the launch finds the pool empty
    outcome = assign(launch_record(ec2.launch("i-late")), T0)

    # Then its write, refused over the version it read, is made again over the other's: both wait, in order
    assert outcome.again
    assert lines.waiting() == ["i-older", "i-late"]
    assert lines.writes == 2


def test_a_launch_whose_every_write_to_the_line_loses_a_race_waits_and_joins_at_its_next_look_in_its_place(
    ec2: FakeAddresses, lines: FakeLines, wiring: Wiring
) -> None:
    # Given an empty pool, and a line that another writer changes before each of the launch's writes
    ec2.add(pool=POOL, on=ec2.launch("i-old"))
    assign = step(ec2, wiring, FakeMetrics())
    older = in_line(ec2, wiring, "i-older", T0 - timedelta(seconds=1))
    lines.racing.extend([older] for _ in range(WRITES))
    record = launch_record(ec2.launch("i-late"))

    # When the launch finds the pool empty, and looks again later
    first = assign(record, T0)
    joined_later = lines.waiting()
    second = assign(after(record, first), T0 + timedelta(seconds=first.delay))

    # Then it waited rather than fail its message, and joined at its next look, in the place of its first
    assert first.again
    assert joined_later == ["i-older"]
    assert second.again
    assert lines.waiting() == ["i-older", "i-late"]
    assert lines.lines[f"{OWNER}/{POOL}"].waiters[1].since == T0


def test_a_launch_behind_older_waiters_takes_the_address_an_earlier_delivery_grew_the_pool_by_for_it(
    ec2: FakeAddresses, lines: FakeLines, wiring: Wiring
) -> None:
    # Given a pool that may grow, an older launch waiting in line, and a free address an earlier delivery of
    # this launch grew the pool by for its instance (it died before associating it)
    assign = step(ec2, wiring, FakeMetrics(), eip_pool_allocate_when_empty="true")
    older = in_line(ec2, wiring, "i-older", T0 - timedelta(seconds=30))
    lines.lines[f"{OWNER}/{POOL}"] = Line((older,), 1)
    grown = ec2.add(pool=POOL, allocated_for=ec2.launch("i-late"))

    # When the launch runs again
    outcome = assign(launch_record("i-late"), T0)

    # Then it takes the address grown for it, and grows the pool by no second one
    assert went_on(outcome)
    assert outcome.changes["allocation_id"] == grown
    assert ec2.count("allocate") == 0
    assert len(ec2.eips) == 1


def test_a_launch_out_of_a_warm_pool_is_not_held_back_by_its_own_instances_entry_of_an_earlier_launch(
    ec2: FakeAddresses, lines: FakeLines, wiring: Wiring
) -> None:
    # Given an instance whose earlier launch (out of its warm pool, since back in it) left its entry in the
    # pool's line (its action lapsed while it waited: nothing took it out), and a free address
    earlier = in_line(ec2, wiring, "i-warm", T0 - timedelta(seconds=60))
    lapsed = wiring.records.get(earlier.lifecycle)
    assert lapsed is not None
    finished = {"step": Step.DONE, "finished_at": T0 - timedelta(seconds=30), "outcome": "action-expired"}
    assert wiring.records.commit(lapsed.model_copy(update=finished), lapsed.seq)
    lines.lines[f"{OWNER}/{POOL}"] = Line((earlier,), 1)
    free = ec2.add(pool=POOL)

    # When the instance launches again (a lifecycle of its own, under another token)
    again = launch_record("i-warm", token="a1b2c3d4-0000-4000-8000-00000000000a")
    again = again.model_copy(update={"id": record_id("i-warm", again.transition, again.token)})
    outcome = step(ec2, wiring, FakeMetrics())(again, T0)

    # Then it takes the free address, rather than leave it to a lifecycle of its own that is over
    assert went_on(outcome)
    assert outcome.changes["allocation_id"] == free


def test_a_launch_finding_the_line_full_waits_without_joining_it(
    ec2: FakeAddresses, lines: FakeLines, wiring: Wiring
) -> None:
    # Given a line as long as the item of a line may hold (DynamoDB refuses an item over 400 KB for good)
    ec2.add(pool=POOL, on=ec2.launch("i-old"))
    full = tuple(in_line(ec2, wiring, f"i-{n:04d}", T0 - timedelta(seconds=1)) for n in range(MAX_WAITERS))
    lines.lines[f"{OWNER}/{POOL}"] = Line(tuple(sorted(full)), 1)

    # When a launch finds the pool empty
    outcome = step(ec2, wiring, FakeMetrics())(launch_record(ec2.launch("i-late")), T0)

    # Then it waits, and the line is not written longer
    assert outcome.again
    assert lines.writes == 0
    assert len(lines.lines[f"{OWNER}/{POOL}"].waiters) == MAX_WAITERS


def test_a_pool_that_may_grow_lets_the_oldest_waiter_take_the_quota_freed_not_a_new_launch(
    ec2: FakeAddresses, lines: FakeLines, wiring: Wiring
) -> None:
    # Given a pool that may grow, empty, and the account's address quota used up: a launch waits in line
    ec2.quota = 2
    ec2.add(pool=POOL, on=ec2.launch("i-old"))
    ec2.add(owner="someone-else")
    assign = step(ec2, wiring, FakeMetrics(), eip_pool_allocate_when_empty="true")
    first = launch_record(ec2.launch("i-first"))
    waited = assign(first, T0)
    assert waited.again

    # When the quota frees (another tool releases its address) and a new launch comes before the waiter looks
    del ec2.eips[next(a for a, eip in ec2.eips.items() if eip.tags.get("nodecycle:owner") == "someone-else")]
    new = assign(launch_record(ec2.launch("i-new")), T0 + timedelta(seconds=5))

    # Then the new launch allocates nothing and waits behind; the waiter grows the pool for itself at its look
    assert new.again
    assert ec2.on("i-new") == []
    taken = assign(after(first, waited), T0 + timedelta(seconds=waited.delay))
    assert went_on(taken)
    assert [eip.tags[POOL_TAG] for eip in ec2.on("i-first")] == [POOL]
    assert lines.waiting() == ["i-new"]


def test_in_allocate_mode_the_oldest_launch_waiting_for_the_quota_takes_the_address_freed_not_a_new_one(
    ec2: FakeAddresses, lines: FakeLines, wiring: Wiring
) -> None:
    # Given allocate mode and the account's address quota used up: a launch waits
    ec2.quota = 1
    ec2.add(allocated_for=ec2.launch("i-old"), on="i-old")
    assign = step(ec2, wiring, FakeMetrics(), eip_mode="allocate", eip_pool_name=None)
    first = launch_record(ec2.launch("i-first"))
    waited = assign(first, T0)
    assert waited.again

    # When the old instance's address is released (its terminate) and a new launch comes before the waiter looks
    ec2.terminate("i-old")
    ec2.eips.clear()
    new = assign(launch_record(ec2.launch("i-new")), T0 + timedelta(seconds=5))

    # Then the new launch allocates nothing and waits behind; the waiter gets the address at its look
    assert new.again
    assert ec2.on("i-new") == []
    taken = assign(after(first, waited), T0 + timedelta(seconds=waited.delay))
    assert went_on(taken)
    assert len(ec2.on("i-first")) == 1
    assert lines.waiting() == ["i-new"]


@pytest.mark.parametrize("mode", ["pool", "allocate"])
def test_a_waiter_whose_lifecycle_is_over_keeps_no_address_from_the_next_launch(
    ec2: FakeAddresses, lines: FakeLines, wiring: Wiring, mode: str
) -> None:
    # Given a launch in line whose lifecycle ended without taking it out (its action completed by hand, found
    # lapsed by the engine): its instance runs on, in service, within its wait
    over = in_line(ec2, wiring, "i-over", T0 - timedelta(seconds=60))
    stored = wiring.records.get(over.lifecycle)
    assert stored is not None
    done = {"step": Step.DONE, "finished_at": T0 - timedelta(seconds=30)}
    assert wiring.records.commit(stored.model_copy(update=done), stored.seq)
    key = f"{OWNER}/{POOL}" if mode == "pool" else f"{OWNER}/"
    lines.lines[key] = Line((over,), 1)
    # and an address to be had: a free one of the pool, or room in the quota
    if mode == "pool":
        ec2.add(pool=POOL)
    overrides: dict[str, Any] = {"eip_mode": mode} if mode == "allocate" else {}
    if mode == "allocate":
        overrides["eip_pool_name"] = None
    assign = step(ec2, wiring, FakeMetrics(), **overrides)

    # When a new launch looks
    outcome = assign(launch_record(ec2.launch("i-new")), T0)

    # Then it gets the address, rather than wait for a lifecycle that waits no more
    assert went_on(outcome)
    assert len(ec2.on("i-new")) == 1


def end_lifecycle(wiring: Wiring, waiter: Waiter, at: datetime) -> None:
    """The waiter's lifecycle ends without the step, which would take it out of the line: its action completed
    by hand, or found lapsed by the engine (its instance runs on, in service)."""
    stored = wiring.records.get(waiter.lifecycle)
    assert stored is not None
    over = {"step": Step.DONE, "finished_at": at, "outcome": "action-expired"}
    assert wiring.records.commit(stored.model_copy(update=over), stored.seq)


@pytest.mark.parametrize("count", [4, 2 * RECORD_LOOKS + 5])
def test_an_address_given_back_behind_waiters_whose_lifecycles_are_over_is_not_left_free_for_their_wait(
    ec2: FakeAddresses, lines: FakeLines, wiring: Wiring, count: int
) -> None:
    # Given the pool's one address on an old instance, launches that found the pool empty a second apart and
    # whose lifecycles then ended without leaving the line (more of them than the 3 records a look used to look
    # up), and one more launch in line behind them
    ec2.add(pool=POOL, on=ec2.launch("i-old"))
    assign = step(ec2, wiring, FakeMetrics())
    over = [in_line(ec2, wiring, f"i-over-{n:02d}", T0 + timedelta(seconds=n)) for n in range(count)]
    lines.lines[f"{OWNER}/{POOL}"] = Line(tuple(over), 1)
    record = launch_record(ec2.launch("i-live"), at=T0 + timedelta(seconds=count))
    now = T0 + timedelta(seconds=count)
    outcome = assign(record, now)
    assert lines.waiting() == [*(waiter.instance_id for waiter in over), "i-live"]
    for waiter in over:
        end_lifecycle(wiring, waiter, now + timedelta(seconds=1))

    # When the old instance gives its address back a minute on, and the live launch looks as it asked to
    given_back = T0 + timedelta(seconds=60)
    while outcome.again:
        record, now = after(record, outcome), now + timedelta(seconds=outcome.delay)
        if now >= given_back and ec2.instances["i-old"] == "running":
            ec2.terminate("i-old")
        outcome = assign(record, now)

    # Then it takes the address at its first look after its return (its looks are at most a minute apart), or,
    # behind more launches over than a look looks up, at a later look (each takes those it found out of the
    # line), not at the end of the wait of the last launch over, EipWaitSeconds after that one found the pool
    # empty (behind 4, it took it 604 s after T0, at its own last look: the address free 544 s, the launch a
    # look from abandoned)
    looks = -(-count // RECORD_LOOKS)
    assert went_on(outcome), outcome
    assert now - given_back <= timedelta(seconds=60 * looks), now - T0
    # And the line is left empty
    assert lines.waiting() == []


def test_a_launch_behind_one_whose_instance_was_terminated_in_line_takes_an_address_given_back_within_15_s(
    ec2: FakeAddresses, lines: FakeLines, wiring: Wiring
) -> None:
    # Given the pool's one address on an old instance, a launch that found the pool empty at T0 and whose
    # instance is terminated while it waits (its lifecycle ends at its next look), and a launch in line behind
    # it
    ec2.add(pool=POOL, on=ec2.launch("i-old"))
    assign = step(ec2, wiring, FakeMetrics())
    records = {
        instance: launch_record(ec2.launch(instance), at=T0 + timedelta(seconds=n))
        for n, instance in enumerate(["i-gone", "i-live"])
    }
    looks = [(T0 + timedelta(seconds=n), instance) for n, instance in enumerate(records)]
    heapq.heapify(looks)
    gone, given_back = T0 + timedelta(seconds=5), T0 + timedelta(seconds=200)
    ended: dict[str, tuple[datetime, Outcome]] = {}

    # When each looks as it asked to, the first one's instance terminated at T0+5 s, and the old instance's
    # address given back at T0+200 s
    while looks:
        now, instance = heapq.heappop(looks)
        if now >= gone and ec2.instances["i-gone"] == "running":
            ec2.terminate("i-gone")
        if now >= given_back and ec2.instances["i-old"] == "running":
            ec2.terminate("i-old")
        outcome = assign(records[instance], now)
        records[instance] = after(records[instance], outcome)
        if outcome.again:
            heapq.heappush(looks, (now + timedelta(seconds=outcome.delay), instance))
        else:
            ended[instance] = (now, outcome)

    # Then the launch behind takes the address within 15 s of its return, as the first in line would: the one
    # ahead of it waits for nothing (looked at as the first in line, every 15 s, rather than every minute)
    taken, outcome = ended["i-live"]
    assert went_on(outcome)
    assert taken - given_back <= timedelta(seconds=FIRST_IN_LINE_DELAY), taken - T0
    assert ended["i-gone"][1].changes["outcome"] == "instance-gone"
    assert lines.waiting() == []


@pytest.mark.parametrize(
    "fault", [AddressRefused("UnauthorizedOperation"), TransientError("RequestLimitExceeded")]
)
def test_a_launch_behind_another_in_an_empty_pool_waits_on_when_the_instances_cannot_be_described(
    ec2: FakeAddresses, lines: FakeLines, wiring: Wiring, fault: Exception
) -> None:
    # Given an empty pool, a launch waiting in its line, and a second one behind it; EC2 refusing or throttling
    # DescribeInstances (a service control policy; a burst of calls)
    ec2.add(pool=POOL, on=ec2.launch("i-old"))
    assign = step(ec2, wiring, FakeMetrics())
    assert assign(launch_record(ec2.launch("i-first")), T0).again
    ec2.faults["instance_states"].append(fault)

    # When the second finds the pool empty
    outcome = assign(
        launch_record(ec2.launch("i-second"), at=T0 + timedelta(seconds=5)), T0 + timedelta(seconds=5)
    )

    # Then it waits in line behind the first as it would have (whether those ahead still wait only tells how
    # often it looks while nothing is free): not a refusal counted toward its failure, nor an error
    assert outcome.again
    assert "refused" not in outcome.changes["extra"][SCRATCH]
    assert lines.waiting() == ["i-first", "i-second"]
