"""A renewal given a slot the budget cannot vouch for (``SlotDecision.unmarked``: its ConfigMap was created again
after the lifecycle began, and the mark of its release may have gone with the one before): the lifecycle's record
tells (``Lifecycles``). Over, the slot goes back at once, marked, and the renewal is refused as a late delivery's;
running, it keeps the slot. Asked only then: a renewal of a slot held, or one the document vouches for, reads no
record (the first ask reads its record itself: see tests/unit/drain/test_late_asks_after_recreation.py)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import timedelta

from nodecycle.domain.budget import SlotReason, SlotRequest
from nodecycle.domain.budget.rules import CREATION_MARGIN, RENEWAL_CREATION_MARGIN
from nodecycle.domain.budget.seed import DrainInProgress
from tests.unit.budget.conftest import TTL
from tests.unit.budget.fakes import START, BudgetFactory, FakeClock, MemoryBudgetStore, slot


@dataclass
class Records:
    """The lifecycles' records as the budget asks them: the record ids of those over; every ask remembered."""

    over: set[str] = field(default_factory=set)
    asked: list[str] = field(default_factory=list)

    def gave_back(self, request: SlotRequest) -> bool:
        self.asked.append(request.record_id)
        return request.record_id in self.over

    def drains(self, owner: str) -> list[DrainInProgress]:
        return []  # (no drain whose node object was deleted)


BEGAN = START - timedelta(minutes=1)


def began(request: SlotRequest) -> SlotRequest:
    return replace(request, token="tok", since=BEGAN, in_progress=True)


def begun_after(request: SlotRequest) -> SlotRequest:
    """``request`` of a lifecycle that began after the ConfigMap was created again at START (past the margin)."""
    return replace(request, since=START + CREATION_MARGIN)


def recreated(store: MemoryBudgetStore) -> None:
    """The ConfigMap deleted and created again (empty) at START, after the lifecycles began."""
    store.uninstall()
    store.reinstall(at=START)


def test_a_late_renewal_of_a_lifecycle_over_gives_the_slot_back_and_wakes_the_waiter_it_passes_to(
    make_budget: BudgetFactory, store: MemoryBudgetStore, clock: FakeClock
) -> None:
    # Given the ConfigMap created again, a budget of one slot held by n3, and n2 waiting for it
    records = Records(over={"rec-n1"})
    recreated(store)
    blue = make_budget(total="1", per_zone=None, lifecycles=records)
    assert blue.acquire(begun_after(slot("n3"))).granted
    assert not blue.acquire(begun_after(slot("n2"))).granted
    clock.advance(TTL.total_seconds() * 2 / 3)
    assert not blue.acquire(begun_after(slot("n2"))).granted  # (its place renewed)
    clock.advance(TTL.total_seconds() / 3 + 1)  # n3's drain died: its holder expired

    # When a late renewal of n1's finished drain runs (in progress, it goes before n2)
    late = blue.renew(began(slot("n1")))

    # Then it is refused as a late delivery, its slot given back, marked; the slot passed on to n2, woken
    assert (late.granted, late.reason, late.unmarked) == (False, SlotReason.RELEASED, False)
    assert records.asked == ["rec-n1"]
    assert late.wake == ("rec-n2",)
    assert [h.node for h in blue.snapshot().holders] == ["n2"]
    assert blue.renew(began(slot("n1"))).reason is SlotReason.RELEASED


def test_a_renewal_of_a_drain_still_running_keeps_the_slot_it_takes_again(
    make_budget: BudgetFactory, store: MemoryBudgetStore, clock: FakeClock
) -> None:
    # Given the ConfigMap created again, and n1's drain running (its record before its cleanup)
    records = Records()
    recreated(store)
    blue = make_budget(total="1", per_zone=None, lifecycles=records)

    # When its renewal takes the slot again
    renewed = blue.renew(began(slot("n1")))

    # Then it keeps it, its record read once; and its next renewal finds it held, reading nothing
    assert (renewed.granted, renewed.reason, renewed.unmarked) == (True, SlotReason.REACQUIRED, True)
    assert records.asked == ["rec-n1"]
    clock.advance(TTL.total_seconds() / 2)
    assert blue.renew(began(slot("n1"))).reason is SlotReason.HELD
    assert [h.node for h in blue.snapshot().holders] == ["n1"]
    assert records.asked == ["rec-n1"]


def test_a_renewal_the_document_vouches_for_reads_no_record(
    make_budget: BudgetFactory, store: MemoryBudgetStore, clock: FakeClock
) -> None:
    # Given a lifecycle that began after the ConfigMap was created (past the margin of a renewal's clock ahead)
    records = Records(over={"rec-n1"})
    store.created_at = BEGAN - RENEWAL_CREATION_MARGIN - timedelta(seconds=1)
    blue = make_budget(total="1", per_zone=None, lifecycles=records)

    # When its renewal takes a slot
    renewed = blue.renew(began(slot("n1")))

    # Then it is its own, as ever
    assert (renewed.granted, renewed.reason) == (True, SlotReason.REACQUIRED)
    assert records.asked == []


def test_a_first_ask_is_left_to_its_step_which_reads_the_record_itself(
    make_budget: BudgetFactory, store: MemoryBudgetStore, clock: FakeClock
) -> None:
    records = Records(over={"rec-n1"})
    recreated(store)

    asked = make_budget(total="1", per_zone=None, lifecycles=records).acquire(began(slot("n1")))

    assert (asked.granted, asked.unmarked) == (True, True)
    assert records.asked == []


def test_without_the_records_a_renewal_takes_the_slot_as_before(
    make_budget: BudgetFactory, store: MemoryBudgetStore, clock: FakeClock
) -> None:
    recreated(store)

    renewed = make_budget(total="1", per_zone=None).renew(began(slot("n1")))

    assert (renewed.granted, renewed.reason, renewed.unmarked) == (True, SlotReason.REACQUIRED, True)


def test_a_late_poll_of_a_drain_over_that_was_paused_when_its_delivery_read_its_record_takes_no_place_in_line(
    make_budget: BudgetFactory, store: MemoryBudgetStore, clock: FakeClock
) -> None:
    # Given the ConfigMap created again, a budget of one slot held by n3, and n2 (not yet touched) waiting for it
    records = Records(over={"rec-n1"})
    recreated(store)
    blue = make_budget(total="1", per_zone=None, lifecycles=records)
    assert blue.acquire(begun_after(slot("n3"))).granted
    assert not blue.acquire(begun_after(slot("n2"))).granted

    # When a late poll of n1's finished drain runs, its delivery having read its record while the drain was paused
    # in line (since before the ConfigMap went), and finds no room
    paused = replace(began(slot("n1")), waiting_since=BEGAN + timedelta(seconds=20))
    late = blue.renew(paused)

    # Then it is refused as a late delivery, its record read once, and takes no place in line (as a drain in
    # progress it went before n2, and was passed the slot n3 gives back, held idle until its place's TTL)
    assert (late.granted, late.reason) == (False, SlotReason.RELEASED)
    assert records.asked == ["rec-n1"]
    assert [w.node for w in blue.snapshot().waiters] == ["n2"]
    assert blue.release("n3", "rec-n3") == ["rec-n2"]
    assert [h.node for h in blue.snapshot().holders] == ["n2"]
    assert blue.renew(paused).reason is SlotReason.RELEASED


def test_a_poll_of_a_paused_drain_still_running_takes_its_place_back_after_the_configmap_is_recreated(
    make_budget: BudgetFactory, store: MemoryBudgetStore, clock: FakeClock
) -> None:
    # Given the ConfigMap created again, a budget of one slot held by n3, and n2 waiting for it
    records = Records()
    recreated(store)
    blue = make_budget(total="1", per_zone=None, lifecycles=records)
    assert blue.acquire(begun_after(slot("n3"))).granted
    assert not blue.acquire(begun_after(slot("n2"))).granted

    # When n1's drain, paused in line since before the ConfigMap went and running still, polls
    paused = replace(began(slot("n1")), waiting_since=BEGAN + timedelta(seconds=20))
    polled = blue.renew(paused)

    # Then it waits in its place back, first (in progress), its record read once; its next poll reads nothing
    assert (polled.granted, polled.reason, polled.position) == (False, SlotReason.LOST, 1)
    assert records.asked == ["rec-n1"]
    clock.advance(TTL.total_seconds() / 2)
    assert blue.renew(paused).reason is SlotReason.LOST
    assert records.asked == ["rec-n1"]
    assert blue.release("n3", "rec-n3") == ["rec-n1"]


def test_a_late_renewal_stamped_by_a_clock_ahead_of_the_api_servers_is_still_checked_against_its_record(
    make_budget: BudgetFactory, store: MemoryBudgetStore, clock: FakeClock
) -> None:
    # Given the ConfigMap created again at START by the API server's clock, and n1's drain, over, that began a second
    # before it: its beginning stamped by a function whose clock runs 7 s ahead of the API server's
    records = Records(over={"rec-n1"})
    recreated(store)
    blue = make_budget(total="1", per_zone=None, lifecycles=records)
    ahead = replace(began(slot("n1")), since=START - timedelta(seconds=1) + timedelta(seconds=7))

    # When a late renewal of it runs
    late = blue.renew(ahead)

    # Then its record tells it is over: refused as a late delivery, the slot not taken
    assert (late.granted, late.reason) == (False, SlotReason.RELEASED)
    assert records.asked == ["rec-n1"]
    assert not blue.snapshot().holders
