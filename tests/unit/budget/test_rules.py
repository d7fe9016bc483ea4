"""The pure rules on hand-made documents: cases the service never produces, but a document edited by hand
(or written by a buggy stack) may contain."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from nodecycle.domain.budget import (
    BudgetDocument,
    BudgetLimits,
    Holder,
    SlotDecision,
    SlotReason,
    SlotRequest,
    Waiter,
)
from nodecycle.domain.budget.limits import owner_limits
from nodecycle.domain.budget.rules import (
    MAX_DOCUMENT_BYTES,
    MAX_PASSED,
    MAX_WAITERS,
    claim,
    eligible_waiters,
    pass_on,
    prune,
    shed,
)
from nodecycle.domain.policy import Quantity
from tests.unit.budget.fakes import START, node


def holder(node: str, owner: str = "blue", renewed_seconds_ago: float = 0, ttl: int = 60) -> Holder:
    renewed = START - timedelta(seconds=renewed_seconds_ago)
    return Holder(
        node=node,
        instance_id=f"i-{node}",
        zone="a",
        owner=owner,
        record_id=f"rec-{node}",
        acquired_at=renewed,
        renewed_at=renewed,
        ttl_seconds=ttl,
    )


def waiter(node: str, owner: str = "blue", zone: str = "a", since: float = 0, **changes: object) -> Waiter:
    """A waiter that joined ``since`` seconds after START."""
    joined = START + timedelta(seconds=since)
    entry = Waiter(
        node=node,
        instance_id=f"i-{node}",
        zone=zone,
        owner=owner,
        record_id=f"rec-{node}",
        waiting_since=joined,
        renewed_at=joined,
        ttl_seconds=600,
    )
    return entry.model_copy(update=changes)


def limits(total: int, per_zone: int | None = None) -> dict[str, object]:
    zone_limit = None if per_zone is None else Quantity(value=per_zone)
    entry = owner_limits(
        BudgetLimits(Quantity(value=total), zone_limit), count_unavailable=False, nodes=None, now=START
    )
    return {"blue": entry, "green": entry}


def picks(doc: BudgetDocument, seconds: float = 60) -> list[str]:
    return [w.node for w in eligible_waiters(doc, START + timedelta(seconds=seconds))]


def test_a_holder_is_stale_from_the_moment_its_ttl_has_passed_since_its_renewal() -> None:
    doc = BudgetDocument(
        holders=(holder("fresh", renewed_seconds_ago=59.999), holder("due", renewed_seconds_ago=60))
    )
    assert [h.node for h in prune(doc, START).holders] == ["fresh"]


def test_a_node_held_by_one_owner_is_never_eligible_as_another_owners_waiter() -> None:
    doc = BudgetDocument.model_validate(
        {
            "holders": [holder("n1", owner="green")],
            "waiters": [waiter("n1"), waiter("n2")],
            "limits": limits(3),
        }
    )
    assert [w.node for w in eligible_waiters(doc, START)] == ["n2"]


def test_a_waiter_whose_owner_never_recorded_its_limits_is_not_eligible() -> None:
    doc = BudgetDocument.model_validate({"waiters": [waiter("n1", owner="gone")], "limits": limits(3)})
    assert eligible_waiters(doc, START) == []


def test_prune_returns_the_same_document_when_nothing_expired() -> None:
    doc = BudgetDocument(holders=(holder("n1"),))
    assert prune(doc, START) is doc


def test_the_limits_of_a_stack_that_left_are_forgotten_after_a_day() -> None:
    # Given the limits of blue (a holder, limits recorded 2 days ago) and green (no entry, recorded 2 days ago)
    old = owner_limits(
        BudgetLimits(Quantity(value=1)), count_unavailable=False, nodes=None, now=START - timedelta(days=2)
    )
    doc = BudgetDocument.model_validate(
        {"holders": [holder("n1", owner="blue")], "limits": {"blue": old, "green": old}}
    )

    # When the document is pruned, Then only the limits of the stack still in the budget remain
    assert list(prune(doc, START).limits) == ["blue"]


# -- who goes next ---------------------------------------------------------------------------------------


def test_a_drain_in_progress_that_lost_its_slot_gets_it_back_before_untouched_nodes() -> None:
    # Given one free slot, two untouched nodes waiting, and a younger waiter whose drain is in progress
    doc = BudgetDocument.model_validate(
        {
            "waiters": [waiter("w1"), waiter("w2", since=1), waiter("cordoned", since=2, in_progress=True)],
            "limits": limits(1),
        }
    )
    # Then the node in progress is next: it is disruption already done
    assert picks(doc) == ["cordoned"]


def test_a_waiter_whose_global_timeout_is_near_goes_before_the_others() -> None:
    doc = BudgetDocument.model_validate(
        {
            "waiters": [
                waiter("w1"),
                waiter("late-later", since=1, urgent_at=START + timedelta(seconds=50)),
                waiter("late-first", since=2, urgent_at=START + timedelta(seconds=30)),
                waiter("not-yet", since=3, urgent_at=START + timedelta(hours=1)),
            ],
            "limits": limits(2),
        }
    )
    # At 60 s both urgent waiters are past their urgent time: earliest first, before any other
    assert picks(doc, 60) == ["late-first", "late-later"]
    # At 40 s only one of them is
    assert picks(doc, 40) == ["late-first", "w1"]


def test_among_waiters_that_fit_the_zone_with_the_most_work_left_goes_first() -> None:
    # Given one slot per zone free in zones a and b... and zone a with three waiters, zone b with one
    doc = BudgetDocument.model_validate(
        {
            "waiters": [
                waiter("b1", zone="b"),
                waiter("a1", zone="a", since=1),
                waiter("a2", zone="a", since=2),
                waiter("a3", zone="a", since=3),
            ],
            "limits": limits(1, per_zone=1),
        }
    )
    # Then with room for one node, it goes to zone a (first come, first served would take b1)
    assert picks(doc) == ["a1"]


def test_a_waiter_passed_over_often_enough_goes_first() -> None:
    doc = BudgetDocument.model_validate(
        {
            "waiters": [
                waiter("b1", zone="b", passed=MAX_PASSED),
                waiter("a1", zone="a", since=1),
                waiter("a2", zone="a", since=2),
            ],
            "limits": limits(1, per_zone=1),
        }
    )
    assert picks(doc) == ["b1"]


def test_a_slot_passed_on_counts_the_older_waiters_that_fit_as_passed_over_as_a_grant_does() -> None:
    # Given room for one more node, green's o waiting first (zone b), then blue's w and y (zone a, the zone
    # with the most work left: w is first in line)
    doc = BudgetDocument(
        waiters=(
            waiter("o", owner="green", zone="b", since=0),
            waiter("w", zone="a", since=10),
            waiter("y", zone="a", since=20),
        ),
        limits=limits(1),
    )
    now = START + timedelta(seconds=60)

    # When blue's write passes the slot on to w
    passed = pass_on(doc, ["rec-w"], "blue", now)

    # Then w holds it from now, with its last renewal as a waiter (it frees it when its place would have
    # expired); o, older and fitting, was passed over once, as when w's own ask is granted; y, younger, not
    assert [w.node for w in passed.waiters] == ["w"]
    (held,) = passed.doc.holders
    assert (held.node, held.record_id, held.acquired_at, held.renewed_at) == (
        "w",
        "rec-w",
        now,
        START + timedelta(seconds=10),
    )
    assert {w.node: w.passed for w in passed.doc.waiters} == {"o": 1, "y": 0}
    granted = claim(doc, _asking("w"), now=now, ttl=timedelta(seconds=600), renewing=False)
    assert {w.node: w.passed for w in granted.doc.waiters} == {"o": 1, "y": 0}


def _asking(node: str) -> SlotRequest:
    return SlotRequest(node=node, instance_id=f"i-{node}", zone="a", owner="blue", record_id=f"rec-{node}")


def test_a_queue_of_long_names_stops_taking_waiters_before_the_document_passes_the_configmap_limit() -> None:
    # Given a full budget and a queue of nodes with long (valid) names, about 670 bytes a waiter: fewer than
    # MAX_WAITERS of them bring the document close to the API server's 1 MiB
    mib, long = 1024 * 1024, "x" * 140

    def name(i: int) -> str:
        return f"ip-10-0-{i // 250}-{i % 250}-{long}.compute.internal"

    def queue(count: int) -> BudgetDocument:
        waiters = tuple(waiter(name(i), since=1) for i in range(count))
        return BudgetDocument(holders=(holder("held", ttl=600),), waiters=waiters, limits=limits(1))

    each = len(queue(101).to_json()) - len(queue(100).to_json())
    doc = queue(100 + (mib - 10_000 - len(queue(100).to_json())) // each)
    assert len(doc.waiters) < MAX_WAITERS

    # When more nodes ask for a slot, one after another
    for i in range(40):
        request = SlotRequest(
            node=name(9000 + i), instance_id=f"i-{i}", zone="a", owner="blue", record_id=f"r{i}"
        )
        doc, decision, *_ = claim(doc, request, now=START, ttl=timedelta(seconds=600), renewing=False)

        # Then they are told the queue is full before the document would pass the limit
        assert len(doc.to_json()) < mib
    assert decision.reason is SlotReason.QUEUE_FULL
    # while a node that must go anyway (a Spot interruption) still gets its forced slot
    forced = replace(request, force=True)
    assert claim(doc, forced, now=START, ttl=timedelta(seconds=600), renewing=False)[1].granted


def _owners(green: tuple[int, int | None], blue: tuple[int, int | None]) -> dict[str, object]:
    """Limits of two owners: (total, per zone) each."""

    def entry(total: int, per_zone: int | None) -> object:
        return limits(total, per_zone)["blue"]

    return {"green": entry(*green), "blue": entry(*blue)}


def test_a_younger_waiter_is_not_eligible_where_it_would_crowd_out_an_older_one_of_a_stricter_owner() -> None:
    # Given green allowed 2 in all, 1 per zone, blue 4 and 2; one green holder in zone c, green's g1 waiting
    # in zone a, then blue's b1 in zone a and b2 in zone b
    doc = BudgetDocument.model_validate(
        {
            "holders": [holder("h1", owner="green").model_copy(update={"zone": "c"})],
            "waiters": [waiter("g1", owner="green"), waiter("b1", since=1), waiter("b2", zone="b", since=2)],
            "limits": _owners(green=(2, 1), blue=(4, 2)),
        }
    )
    # Then g1 goes; blue's nodes fit blue's limits, but either would fill green's view (2 in all): both
    # wait, b1 for the zone too
    assert picks(doc) == ["g1"]

    # and with green allowed 3 in all, b2 of another zone leaves g1 its room; b1 of g1's zone does not
    doc = doc.model_copy(update={"limits": _owners(green=(3, 1), blue=(4, 2))})
    assert picks(doc) == ["g1", "b2"]


def test_an_owner_that_counts_the_younger_node_already_sees_no_room_taken_by_it() -> None:
    # Given green allowed 1 with g1 waiting, and blue's b1, a node green counts as unavailable already
    green = owner_limits(
        BudgetLimits(Quantity(value=2), None),
        count_unavailable=True,
        nodes=[node("b1", schedulable=False), node("g1")],
        now=START,
    )
    doc = BudgetDocument.model_validate(
        {
            "waiters": [waiter("g1", owner="green"), waiter("b1", since=1)],
            "limits": {"green": green, "blue": limits(2)["blue"]},
        }
    )
    # Then both go: b1 draining takes none of green's room (green counts it either way: b1 + g1 = 2)
    assert picks(doc) == ["g1", "b1"]


def test_a_document_past_its_bound_sheds_the_youngest_waiters_of_the_owner_not_in_progress_urgent_last() -> (
    None
):
    # Given a document past MAX_DOCUMENT_BYTES (a forced slot took it there), whose waiters of owner blue are,
    # in line: an urgent one, an old one, one in progress, and young ones; and another owner's youngest
    long = "x" * 200
    filler = tuple(waiter(f"blue-{i}-{long}", since=10) for i in range(MAX_DOCUMENT_BYTES // 300))
    line = (
        waiter("urgent", since=1, urgent_at=START),
        waiter("old", since=2),
        waiter("in-progress", since=100, in_progress=True),
        *filler,
        waiter("young", since=50),
        waiter("green-youngest", owner="green", since=200),
    )
    doc = BudgetDocument(waiters=line)
    assert len(doc.to_json()) > MAX_DOCUMENT_BYTES

    # When it is brought back under its bound for owner blue
    kept, shed_ = shed(doc, "blue", START + timedelta(seconds=300))

    # Then blue's youngest went first (the later of two that came at once first), then older ones, until it fits
    assert (
        len(kept.to_json())
        <= MAX_DOCUMENT_BYTES
        < len(kept.to_json()) + BudgetDocument.entry_bytes(shed_[-1])
    )
    assert [w.node for w in shed_[:2]] == ["young", filler[-1].node]
    # and neither the drain in progress, nor another owner's waiter, nor the urgent one (while others remain)
    assert {"in-progress", "green-youngest", "urgent"} <= {w.node for w in kept.waiters}
    # (a set: `in` on the list compared each of some 3,000 waiters with each of those shed, pydantic's __eq__
    # 4 million times, 40 s of this test's 44; the waiters are frozen, hashable, so it is the same test)
    gone = set(shed_)
    assert [w.node for w in kept.waiters] == [w.node for w in line if w not in gone]


def test_a_document_within_its_bound_sheds_nothing() -> None:
    doc = BudgetDocument(waiters=(waiter("a"), waiter("b")))
    assert shed(doc, "blue", START) == (doc, ())


def test_an_older_waiter_its_owner_counts_already_leaves_room_to_a_younger_one_of_another_owner() -> None:
    # Given green allowed 1 and counting unavailable nodes, its g1 waiting on a node cordoned already (green
    # counts it: its view is full), and blue, allowed 2, with b1 waiting after it
    green = owner_limits(
        BudgetLimits(Quantity(value=1), None),
        count_unavailable=True,
        nodes=[node("g1", schedulable=False), node("b1")],
        now=START,
    )
    doc = BudgetDocument.model_validate(
        {
            "waiters": [waiter("g1", owner="green"), waiter("b1", since=1)],
            "limits": {"green": green, "blue": limits(2)["blue"]},
        }
    )
    # Then both go: g1 takes no new slot in green's view, so b1 beside it crowds nothing out (as it does not
    # once g1 holds its slot)
    assert picks(doc) == ["g1", "b1"]
    held = doc.model_copy(update={"holders": (holder("g1", owner="green"),), "waiters": doc.waiters[1:]})
    assert picks(held) == ["b1"]


def test_a_denied_waiter_is_told_the_slots_its_rivals_take_turns_in_whoever_holds_them_now() -> None:
    # Given an owner of 4 slots and 1 per zone: one holder, and waiters of zones a and b before the asking nodes
    doc = BudgetDocument(
        holders=(holder("held", ttl=600),),
        waiters=(waiter("a1", zone="a"), waiter("b1", zone="b", since=1)),
        limits=limits(4, per_zone=1),
    )
    asked: dict[str, SlotDecision] = {}
    for node_name, zone in (("a2", "a"), ("n", None)):
        request = SlotRequest(node_name, f"i-{node_name}", zone, "blue", f"rec-{node_name}")
        later = START + timedelta(seconds=2)
        doc, decision, *_ = claim(doc, request, now=later, ttl=timedelta(seconds=600), renewing=False)
        asked[node_name] = decision
    # Then a node of zone a takes turns in its zone's slot, one at a time: a1 is a round before it
    assert (asked["a2"].ahead, asked["a2"].room) == (1, 1)
    # and a node of unknown zone in the owner's 4, behind every waiter of every zone
    assert (asked["n"].ahead, asked["n"].room) == (3, 4)
