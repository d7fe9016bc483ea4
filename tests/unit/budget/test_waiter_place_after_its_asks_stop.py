"""A waiter whose asks stop (its function throttled, its lifecycle ended without a release) keeps its place until it
expires: a TTL after its last write. Written again only when it would expire within two of its asks (not a third of
the TTL apart), a place still lasts no longer after the last ask than a TTL, as before; it lasts less on average, so
a waiter whose asks pause (throttled) loses it sooner: after two of its asks' longest interval at the least, where
it was two thirds of the TTL (measured here, asks 30 s apart told 120 s, TTL 600 s: 270 s at the least, 420 s
before). That is the price of the fewer writes (tests/unit/budget/test_waiter_renewal_churn.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.budget import SlotReason
from tests.unit.budget.fakes import FakeClock, slot
from tests.unit.budget.test_waiter_renewal_churn import TTL, CountingStore, budget_on
from tests.unit.drain.test_drain_steps import policy

CADENCE = 30  # seconds between a waiter's asks near the front of the line (BudgetRetrySeconds)


def place_after_its_last_ask(asks: int, asks_within: timedelta | None) -> float:
    """How long the place of a waiter that asked ``asks`` times, ``CADENCE`` apart, lasts after its last ask."""
    drain = policy(budget_holder_ttl_seconds=str(int(TTL.total_seconds())))
    clock = FakeClock()
    budget = budget_on(CountingStore(), clock, drain, asks_within=asks_within, told=asks_within is not None)
    assert budget.acquire(slot("holder")).granted
    for _ in range(asks):
        clock.advance(CADENCE)
        assert (
            budget.renew(slot("holder")).reason is SlotReason.HELD
        )  # (its drain polls: the slot stays held)
        assert budget.acquire(slot("w")).reason is SlotReason.NO_ROOM
    last = clock.now()
    place = next(w for w in budget.snapshot().waiters if w.node == "w")
    return place.expires_in_seconds + (clock.now() - last).total_seconds()


@pytest.mark.parametrize(
    "asks_within", [pytest.param(None, id="renewed a third of the TTL apart"), timedelta(seconds=120)]
)
def test_a_place_lasts_no_longer_than_a_ttl_after_its_waiters_last_ask(asks_within: timedelta | None) -> None:
    # Given a waiter asking every 30 s, whose asks stop after any of its first 60 asks
    lasts = [place_after_its_last_ask(asks, asks_within) for asks in range(1, 61)]

    # Then its place lasts no longer than a TTL after its last ask, and at least two of its asks' longest interval
    # (a third of the TTL apart: two thirds of the TTL)
    floor = 2 * (asks_within or TTL / 3).total_seconds()
    print(
        f"\nplace after the last ask: {min(lasts):.0f}-{max(lasts):.0f} s (TTL {TTL.total_seconds():.0f} s)"
    )
    assert max(lasts) <= TTL.total_seconds()
    assert min(lasts) > floor
