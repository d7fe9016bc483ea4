"""What the waiters' places cost the API server: every write of the budget replaces the whole ConfigMap (a waiter
takes 300-650 bytes of it, so 2,000 waiters make a document of about 800 KB), and a waiter's ask writes its place
again once it is a third of the TTL old. Counted here over an hour of a long line, each waiter asking at the drain's
own cadence (``_retry_in_line``: BudgetRetrySeconds near the front, up to four times that further back), behind a
holder renewing at every poll of its drain. A waiter's place needs to outlast only its next ask (the drain asks at
most ``longest_wait_in_line`` apart), so it is written again only when it would expire within two of those: one ask
late or lost by a whole interval still finds its place."""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from types import SimpleNamespace

import pytest

from nodecycle.domain.budget import BudgetDocument, BudgetLimits, DisruptionBudget, SlotReason, SlotRequest
from nodecycle.domain.drain import acquire
from nodecycle.domain.drain.acquire import _retry_in_line
from nodecycle.domain.policy import DrainPolicy, Quantity
from nodecycle.wiring import drain as drain_wiring
from tests.unit.budget.fakes import FakeClock, FakeInventory, MemoryBudgetStore, RecordingMetrics, slot
from tests.unit.drain.test_drain_steps import policy, settings

TTL = timedelta(seconds=600)  # as deployed (BudgetHolderTtlSeconds)
POLL = 5  # the drain's poll: its holder renews (unwritten but a third of the TTL apart) at every one
HOUR = 3600.0


def longest_wait_in_line(drain: DrainPolicy) -> float:
    """The longest a drain of ``drain`` waits in line between two asks."""
    return acquire.longest_wait_in_line(drain.budget_retry_seconds, drain.holder_ttl, drain.poll_seconds)


class CountingStore(MemoryBudgetStore):
    """The store, counting the writes and the bytes each one sends."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0
        self.bytes = 0

    def update[T](self, mutate: Callable[[BudgetDocument | None], tuple[BudgetDocument | None, T]]) -> T:
        version = self.version
        result = super().update(mutate)
        if self.version != version:
            self.writes += 1
            self.bytes += len((self.text or "").encode())
        return result


@dataclass
class Churn:
    writes_per_waiter_hour: float
    bytes_per_waiter_hour: float  # at this line's length
    entry_bytes: float  # what one waiter's place takes of the document
    joined: dict[
        str, set[str]
    ]  # each waiter's places in line (waitingSince): more than one, it lost its place


def budget_on(
    store: CountingStore,
    clock: FakeClock,
    drain: DrainPolicy,
    *,
    asks_within: timedelta | None = None,
    told: bool = True,
) -> DisruptionBudget:
    """The budget of one slot; told how often its waiters ask (``asks_within``, default the drain's), unless not
    ``told`` (a place renewed a third of the TTL apart, as a slot is)."""
    return DisruptionBudget(
        store=store,
        nodes=FakeInventory(),
        clock=clock,
        metrics=RecordingMetrics(),
        limits=BudgetLimits(Quantity.parse("1"), None),
        holder_ttl=drain.holder_ttl,
        count_unavailable=False,
        owner="blue",
        waiter_asks_within=(asks_within or timedelta(seconds=longest_wait_in_line(drain))) if told else None,
    )


def churn(waiters: int, *, late: float = 0.0, hours: float = 1.0, seed: int = 7) -> Churn:
    """An hour of ``waiters`` in line behind one holder, after a warm-up of a TTL; each ask comes up to ``late`` of
    its wait later than the drain asked for (a delivery late, a container cold)."""
    drain = policy(budget_holder_ttl_seconds=str(int(TTL.total_seconds())))
    clock = FakeClock()
    start = clock.now()
    store = CountingStore()
    budget = budget_on(store, clock, drain)
    rng = random.Random(seed)
    holder = slot("holder")
    assert budget.acquire(holder).granted
    # (time, order, node): the waiters' first asks a second apart, as a scale-in's notices come
    asks: list[tuple[float, int, str]] = [(1.0 + i, i, f"n{i}") for i in range(waiters)]
    asks += [(POLL * k, -1, "holder") for k in range(1, int((TTL.total_seconds() + hours * HOUR) / POLL) + 1)]
    heapq.heapify(asks)
    joined: dict[str, set[str]] = {}
    measured_from = TTL.total_seconds()
    writes_before = bytes_before = 0
    order = waiters
    while asks:
        at, _, node = heapq.heappop(asks)
        if at > measured_from and measured_from >= 0:
            writes_before, bytes_before, measured_from = store.writes, store.bytes, -1.0
        if at > TTL.total_seconds() + hours * HOUR:
            break
        clock.current = start + timedelta(seconds=at)
        if node == "holder":
            assert budget.renew(holder).reason is SlotReason.HELD
            continue
        request: SlotRequest = slot(node)
        decision = budget.acquire(request)
        assert decision.reason is SlotReason.NO_ROOM, decision
        doc = BudgetDocument.from_json(store.text or "")
        waiter = doc.waiter(node)
        assert waiter is not None
        joined.setdefault(node, set()).add(waiter.waiting_since.isoformat())
        wait = _retry_in_line(decision, request, clock.now(), drain)
        order += 1
        heapq.heappush(asks, (at + wait * (1 + rng.uniform(0, late)), order, node))
    doc = BudgetDocument.from_json(store.text or "")
    entry = sum(BudgetDocument.entry_bytes(w) for w in doc.waiters) / len(doc.waiters)
    writes, sent = store.writes - writes_before, store.bytes - bytes_before
    holder_writes = (
        hours * HOUR / (TTL.total_seconds() / 3)
    )  # (the holder's renewals, a third of the TTL apart)
    return Churn(
        writes_per_waiter_hour=(writes - holder_writes) / waiters / hours,
        bytes_per_waiter_hour=sent * (1 - holder_writes / writes) / waiters / hours,
        entry_bytes=entry,
        joined=joined,
    )


def test_a_waiters_place_is_written_again_only_when_it_would_expire_within_two_of_its_asks() -> None:
    # Given 30 nodes waiting in line behind one holder, each asking at the drain's cadence

    # When they wait for an hour
    measured = churn(30)

    # Then each waiter's place is written 10 times an hour (it was 15 when written a third of the TTL apart): at
    # 2,000 waiters, 5.6 writes a second of an 800 KB ConfigMap, not 8.3
    print(
        f"\n30 waiters: {measured.writes_per_waiter_hour:.1f} writes and "
        f"{measured.bytes_per_waiter_hour / 1e3:.0f} KB per waiter per hour; a place {measured.entry_bytes:.0f} B; "
        f"at 2,000 waiters: {measured.writes_per_waiter_hour * 2000 / HOUR:.1f} writes/s of "
        f"{measured.entry_bytes * 2000 / 1e3:.0f} KB"
    )
    assert measured.writes_per_waiter_hour < 11
    # And no waiter lost its place (one waitingSince each, its first ask's)
    assert all(len(places) == 1 for places in measured.joined.values())


@pytest.mark.parametrize("late", [0.5, 1.0])
def test_a_waiter_whose_asks_come_late_keeps_its_place(late: float) -> None:
    # Given waiters whose asks come up to half or a whole wait later than the drain asked for (a delivery late, a
    # container cold), for two hours
    measured = churn(12, late=late, hours=2)

    # Then none of them lost its place in line
    assert all(len(places) == 1 for places in measured.joined.values())


def test_a_place_of_a_waiter_told_to_ask_far_apart_is_written_no_sooner_than_a_third_of_the_ttl_apart() -> (
    None
):
    # Given a waiter whose asks come up to 250 s apart, under a TTL of 600 s (two of them pass its place's life)
    clock = FakeClock()
    store = CountingStore()
    budget = budget_on(
        store, clock, policy(budget_holder_ttl_seconds="600"), asks_within=timedelta(seconds=250)
    )
    assert budget.acquire(slot("holder")).granted
    assert budget.acquire(slot("n0")).reason is SlotReason.NO_ROOM
    written = store.writes

    # When it asks again 150 s later, and 60 s after that
    clock.advance(150)
    assert budget.acquire(slot("n0")).reason is SlotReason.NO_ROOM
    unwritten = store.writes
    clock.advance(60)
    assert budget.acquire(slot("n0")).reason is SlotReason.NO_ROOM

    # Then its place is written again only at the second, a third of the TTL after the last (as before it was told)
    assert (unwritten, store.writes) == (written, written + 1)


def test_the_drain_function_tells_its_budget_how_often_its_waiters_ask() -> None:
    # Given the drain function's settings as deployed
    config = settings(budget_holder_ttl_seconds=str(int(TTL.total_seconds())))
    ports = SimpleNamespace(settings=config, clock=FakeClock(), metrics=RecordingMetrics(), records=None)

    # When its composition root builds the budget
    wired = drain_wiring.budget.__wrapped__(config, ports)

    # Then the budget knows the longest its waiters wait between their asks
    assert wired.waiter_asks_within == timedelta(
        seconds=longest_wait_in_line(policy(budget_holder_ttl_seconds="600"))
    )
