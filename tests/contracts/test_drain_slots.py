"""The budget as the drain steps use it (the Slots port): the drain unit tests' FakeSlots and the real
DisruptionBudget over MemoryBudgetStore (itself held to the ConfigMap store by test_budget_store.py) answer
alike.

What a drain step relies on: a release wakes only the waiter it hands the slot to (that waiter holds it
then); a lifecycle that gave its slot back takes none again (``released``: a late delivery of one of its
steps); a holder that stops renewing expires, and its room goes to the next ask; the budget forgets only its
own stack's instances; a budget whose ConfigMap is not there refuses every write (``BudgetNotInstalled``);
limits per zone hold; a node that finds no room is told its place in line and who stands ahead of it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import pytest

from nodecycle.adapters.kube.budget import BudgetNotInstalled
from nodecycle.domain.budget import BudgetLimits, DisruptionBudget, SlotReason, SlotRequest
from nodecycle.domain.policy import Quantity
from nodecycle.domain.ports.budget import Slots
from tests.support.fakes import T0, FakeClock
from tests.unit.budget.fakes import FakeInventory, MemoryBudgetStore, RecordingMetrics
from tests.unit.drain.test_drain_steps import HOLDER_TTL, OWNER, FakeSlots


@dataclass
class Side:
    slots: Slots
    clock: FakeClock
    store: MemoryBudgetStore


def fake(room: int, per_zone: int | None) -> Side:
    clock = FakeClock(T0)
    slots = FakeSlots(room=room, per_zone=per_zone, clock=clock)
    return Side(slots, clock, slots.store)


def real(room: int, per_zone: int | None) -> Side:
    clock, store = FakeClock(T0), MemoryBudgetStore()
    budget = DisruptionBudget(
        store=store,
        nodes=FakeInventory(),
        clock=clock,
        metrics=RecordingMetrics(),
        limits=BudgetLimits(Quantity(value=room), None if per_zone is None else Quantity(value=per_zone)),
        holder_ttl=HOLDER_TTL,
        count_unavailable=False,
        owner=OWNER,
    )
    return Side(budget, clock, store)


Budget = Callable[[int, int | None], Side]


@pytest.fixture(params=[fake, real], ids=["FakeSlots", "DisruptionBudget"])
def budget(request: pytest.FixtureRequest) -> Budget:
    """A builder of a budget of ``room`` slots (``per_zone`` in each zone, if given), on either side."""
    builder: Budget = request.param
    return builder


def ask(name: str, zone: str | None = "eu-west-1a", **changes: object) -> SlotRequest:
    """The slot request of lifecycle ``rec-<name>`` of instance ``i-<name>``, for node ``name``."""
    fields: dict[str, object] = {
        "node": name,
        "instance_id": f"i-{name}",
        "zone": zone,
        "owner": OWNER,
        "record_id": f"rec-{name}",
        "token": "token",
        "since": T0,
    }
    return SlotRequest(**(fields | changes))  # type: ignore[arg-type]


def test_a_release_wakes_only_the_waiter_it_hands_the_slot_to(budget: Budget) -> None:
    side = budget(1, None)
    assert side.slots.acquire(ask("a")).granted
    side.clock.advance(1)
    assert not side.slots.acquire(ask("b")).granted
    side.clock.advance(1)
    assert not side.slots.acquire(ask("c")).granted

    # When the holder gives its slot back, one slot frees: the first waiter is woken, holding it already
    assert side.slots.release("a", "rec-a", "token") == ["rec-b"]
    renewed = side.slots.renew(ask("b"))
    assert (renewed.granted, renewed.reason) == (True, SlotReason.HELD)
    # and the other still waits
    assert side.slots.acquire(ask("c")).reason is SlotReason.NO_ROOM


def test_a_lifecycle_that_gave_its_slot_back_takes_none_again(budget: Budget) -> None:
    side = budget(1, None)
    assert side.slots.acquire(ask("a")).granted
    assert side.slots.release("a", "rec-a", "token") == []
    side.clock.advance(5)

    # A late delivery of one of its steps asks again: refused, though there is room
    again = side.slots.acquire(ask("a"))
    assert (again.granted, again.reason) == (False, SlotReason.RELEASED)
    assert side.slots.renew(ask("a")).reason is SlotReason.RELEASED
    # while another lifecycle of the node (begun later) takes it
    assert side.slots.acquire(ask("a", record_id="rec-a-next", since=T0 + timedelta(seconds=5))).granted


def test_a_holder_that_stops_renewing_expires_and_the_next_ask_takes_its_room(budget: Budget) -> None:
    side = budget(1, None)
    assert side.slots.acquire(ask("a")).granted
    side.clock.advance(HOLDER_TTL.total_seconds() - 1)
    assert side.slots.acquire(ask("b")).reason is SlotReason.NO_ROOM

    # When its TTL has passed since its last renewal (its drain died)
    side.clock.advance(1)

    # Then the waiter's next ask takes the slot, and the holder's renewal finds it lost
    assert side.slots.acquire(ask("b")).granted
    lost = side.slots.renew(ask("a"))
    assert (lost.granted, lost.reason) == (False, SlotReason.LOST)


def test_forgetting_another_stacks_instance_is_refused(budget: Budget) -> None:
    side = budget(1, None)
    assert side.slots.acquire(ask("a")).granted
    with pytest.raises(ValueError, match="stack-b"):
        side.slots.forget("stack-b", "i-a")
    # and its own instance's are forgotten
    assert side.slots.forget(OWNER, "i-a") == []
    assert side.slots.acquire(ask("b")).granted


def test_a_budget_whose_configmap_is_not_there_refuses_every_write(budget: Budget) -> None:
    side = budget(1, None)
    side.store.uninstall()
    with pytest.raises(BudgetNotInstalled):
        side.slots.acquire(ask("a"))
    with pytest.raises(BudgetNotInstalled):
        side.slots.renew(ask("a"))
    # (a release or a forget of a budget that is not there has nothing to give back: it writes nothing)
    assert side.slots.release("a", "rec-a", "token") == []
    assert side.slots.forget(OWNER, "i-a") == []


def test_a_zone_at_its_limit_takes_no_more_while_another_zone_does(budget: Budget) -> None:
    side = budget(2, 1)
    assert side.slots.acquire(ask("a1", "eu-west-1a")).granted
    full = side.slots.acquire(ask("a2", "eu-west-1a"))
    assert (full.granted, full.reason) == (False, SlotReason.NO_ROOM)
    assert side.slots.acquire(ask("b1", "eu-west-1b")).granted
    # a node of unknown zone counts against every zone: none has room
    assert not side.slots.acquire(ask("x", None)).granted


def test_a_node_that_finds_no_room_is_told_its_place_in_line(budget: Budget) -> None:
    side = budget(1, None)
    assert side.slots.acquire(ask("a")).granted
    first = side.slots.acquire(ask("b"))
    side.clock.advance(1)
    second = side.slots.acquire(ask("c"))
    assert (first.position, first.ahead, first.room) == (1, 0, 1)
    assert (second.position, second.ahead, second.room) == (2, 1, 1)
    # and asking again keeps it (a renewal of its place, not a new one at the end)
    side.clock.advance(1)
    assert side.slots.acquire(ask("b")).position == 1
