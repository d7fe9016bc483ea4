"""Why a renewal's margin around a ConfigMap's creation (``RENEWAL_CREATION_MARGIN``) stays as far as any clock may
run ahead (``MAX_CLOCK_AHEAD``, 10 min), though the store now tells the creation on the reader's own clock (the API
server's Date): and what it costs.

The store measures the clock of the container that reads the document against the API server's; a lifecycle's
beginning (``SlotRequest.since``, its record's ``received_at``) is stamped by another container, the intake's, whose
clock nobody measures. A stamp 5 minutes ahead took a lifecycle begun a second before the creation for one begun 5
minutes after it: with a margin of seconds, a late poll of it over took its slot again unjudged, idle until its TTL.
What the margin costs: a record read per renewal that finds no slot of its own (its slot lost: expired, or gone
with the ConfigMap) of a lifecycle begun within 10 minutes after a creation; nothing for the renewals of slots held,
every drain's poll, which are all a refresh's renewals."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from nodecycle.domain.budget import SlotReason, SlotRequest
from nodecycle.domain.budget.rules import RENEWAL_CREATION_MARGIN
from tests.unit.budget.conftest import TTL
from tests.unit.budget.fakes import START, BudgetFactory, FakeClock, MemoryBudgetStore, slot
from tests.unit.budget.test_unmarked_renewals import Records, recreated

INTAKE_AHEAD = timedelta(minutes=5)  # how far the clock that stamped the lifecycles' beginnings runs ahead


def test_a_late_poll_of_a_lifecycle_stamped_by_a_clock_five_minutes_ahead_is_judged_on_its_record(
    make_budget: BudgetFactory, store: MemoryBudgetStore, clock: FakeClock
) -> None:
    # Given n1's lifecycle begun a second before the ConfigMap was created again at START, over since, its beginning
    # stamped by an intake whose clock runs 5 minutes ahead
    records = Records(over={"rec-n1"})
    recreated(store)
    blue = make_budget(total="1", per_zone=None, lifecycles=records)
    late = replace(
        slot("n1"), token="tok", since=START - timedelta(seconds=1) + INTAKE_AHEAD, in_progress=True
    )

    # When a late poll of its drain renews the slot
    renewed = blue.renew(late)

    # Then its record is read, and the slot is not taken: marked given back
    assert (renewed.granted, renewed.reason) == (False, SlotReason.RELEASED)
    assert records.asked == ["rec-n1"]
    assert not blue.snapshot().holders


def test_what_the_margin_costs_a_refresh_begun_within_it_is_one_record_read_per_slot_lost(
    make_budget: BudgetFactory, store: MemoryBudgetStore, clock: FakeClock
) -> None:
    # Given the ConfigMap created again at START, and a refresh of 12 nodes under a budget of 3 whose lifecycles all
    # begin within the margin after it
    records = Records()
    recreated(store)
    blue = make_budget(total="3", per_zone=None, lifecycles=records)
    clock.advance(60)
    assert timedelta(seconds=60) < RENEWAL_CREATION_MARGIN
    nodes = [replace(slot(f"n{i}"), token="tok", since=clock.now()) for i in range(12)]

    # When each drain asks, polls every 10 s (renewing its slot) for 60 s, and gives its slot back, the waiters asking
    # again every 10 s
    stall = int(TTL.total_seconds()) // 10 + 2  # polls

    def run(requests: list[SlotRequest], stalled: str | None = None) -> int:
        draining: dict[str, int] = {}
        waiting = list(requests)
        renewals = 0
        while waiting or draining:
            for request in list(waiting):
                if blue.acquire(request).granted:
                    waiting.remove(request)
                    draining[request.node] = 0
            for request in requests:
                if request.node not in draining:
                    continue
                polls = draining[request.node]
                if polls >= (6 if request.node != stalled else stall + 6):
                    del draining[request.node]
                    blue.release(request.node, request.record_id, request.token)
                    continue
                draining[request.node] += 1
                if request.node == stalled and 0 < polls < stall:
                    continue  # its drain stalls past its TTL (its function failing): its holder expires
                renewals += 1
                assert blue.renew(replace(request, in_progress=True)).granted
            clock.advance(10)
        return renewals

    renewals = run(nodes[:9])

    # Then every renewal of a slot held reads no record
    assert renewals == 9 * 6
    assert records.asked == []
    # and a drain whose slot expired meanwhile reads its record at its next renewal, once
    run(nodes[9:], stalled="n9")
    assert records.asked == ["rec-n9"]
