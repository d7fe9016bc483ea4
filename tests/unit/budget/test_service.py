from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta

import pytest

from nodecycle.adapters.kube.budget import BudgetNotInstalled
from nodecycle.domain.budget import DisruptionBudget, Holder, SlotReason, Verdict, Waiter
from nodecycle.domain.budget.rules import force_release
from nodecycle.domain.errors import TransientError
from tests.unit.budget.fakes import (
    BudgetFactory,
    FakeClock,
    FakeInventory,
    MemoryBudgetStore,
    RecordingMetrics,
    node,
    slot,
)

# --- acquire and wait --------------------------------------------------------------------------------


def test_a_node_that_holds_a_slot_and_asks_again_holds_it_once(
    make_budget: BudgetFactory, store: MemoryBudgetStore
) -> None:
    budget = make_budget()
    first = budget.acquire(slot("n1"))
    again = budget.acquire(slot("n1"))

    assert (first.reason, again.reason) == (SlotReason.GRANTED, SlotReason.HELD)
    assert again.holders == 1
    doc = store.read()
    assert doc is not None
    assert [h.node for h in doc.holders] == ["n1"]


def test_a_full_zone_waits_while_the_other_zones_drain(make_budget: BudgetFactory) -> None:
    # Given limits 4 in all, 2 per zone, and zone a already draining 2 nodes
    budget = make_budget("4", "2")
    assert budget.acquire(slot("a1", "a")).granted
    assert budget.acquire(slot("a2", "a")).granted

    # When a third node of zone a and a node of zone b ask
    third = budget.acquire(slot("a3", "a"))
    other_zone = budget.acquire(slot("b1", "b"))

    # Then zone a's node waits first in line, and zone b's node passes it
    assert (third.granted, third.reason, third.position) == (False, SlotReason.NO_ROOM, 1)
    assert other_zone.granted


def test_a_newcomer_does_not_overtake_an_older_waiter_that_fits(make_budget: BudgetFactory) -> None:
    # Given a full budget of 1 with a node of zone b waiting
    budget = make_budget("1", None)
    budget.acquire(slot("a1", "a"))
    assert not budget.acquire(slot("b1", "b")).granted

    # When the holder releases and, before the waiter is woken, a newcomer asks
    woken = budget.release("a1", "rec-a1")
    newcomer = budget.acquire(slot("c1", "c"))

    # Then the release passed the slot on to the waiter, which it wakes: the newcomer waits, and the waiter
    # finds the slot held for it
    assert woken == ["rec-b1"]
    assert (newcomer.granted, newcomer.reason, newcomer.position) == (False, SlotReason.NO_ROOM, 1)
    assert budget.acquire(slot("b1", "b")).reason is SlotReason.HELD


def test_a_node_without_a_zone_counts_against_every_zone(make_budget: BudgetFactory) -> None:
    # Given 1 per zone and a holder whose zone is unknown
    budget = make_budget("4", "1")
    assert budget.acquire(slot("x1", None)).granted

    # When nodes of zones a and b ask, then another of unknown zone
    # Then none fits: the unknown node might be in any of those zones
    assert not budget.acquire(slot("a1", "a")).granted
    assert not budget.acquire(slot("b1", "b")).granted
    assert not budget.acquire(slot("x2", None)).granted


def test_a_waiter_that_stops_asking_loses_its_place(make_budget: BudgetFactory, clock: FakeClock) -> None:
    # Given a full budget of 1 and two waiters
    budget = make_budget("1", None, ttl=timedelta(seconds=60))
    budget.acquire(slot("n1"))
    budget.acquire(slot("w1"))
    budget.acquire(slot("w2"))

    # When w1 stops asking for longer than the TTL while w2 keeps asking
    clock.advance(40)
    budget.acquire(slot("w2"))
    clock.advance(30)

    # Then w2 is first in line and is the one woken by the release
    assert budget.release("n1", "rec-n1") == ["rec-w2"]


def test_a_request_for_another_owner_is_a_programming_error(make_budget: BudgetFactory) -> None:
    with pytest.raises(ValueError, match="owner"):
        make_budget(owner="blue").acquire(slot("n1", owner="green"))


# --- renew ----------------------------------------------------------------------------------------------


def test_a_holder_that_expired_takes_its_slot_again_when_there_is_room(
    make_budget: BudgetFactory, clock: FakeClock
) -> None:
    budget = make_budget("1", None, ttl=timedelta(seconds=60))
    budget.acquire(slot("n1"))
    clock.advance(61)

    assert budget.renew(slot("n1")).reason is SlotReason.REACQUIRED


def test_a_holder_that_expired_while_another_took_its_slot_is_told_it_lost_it(
    make_budget: BudgetFactory, clock: FakeClock
) -> None:
    # Given a holder that went quiet for longer than its TTL, and a node that took the free slot
    budget = make_budget("1", None, ttl=timedelta(seconds=60))
    budget.acquire(slot("n1"))
    clock.advance(61)
    assert budget.acquire(slot("n2")).granted

    # When the first holder renews
    decision = budget.renew(slot("n1"))

    # Then it is denied and waits in line (its drain pauses evicting)
    assert (decision.granted, decision.reason, decision.position) == (False, SlotReason.LOST, 1)


# --- release and wake -----------------------------------------------------------------------------------


def test_a_release_wakes_as_many_of_its_own_waiters_as_there_is_room_for(make_budget: BudgetFactory) -> None:
    # Given blue holding 2 slots of 2, with green then blue then blue waiting
    blue, green = make_budget("2", None, owner="blue"), make_budget("2", None, owner="green")
    blue.acquire(slot("b1"))
    blue.acquire(slot("b2"))
    green.acquire(slot("g1", owner="green"))
    blue.acquire(slot("b3"))
    blue.acquire(slot("b4"))

    # When blue releases one slot, then another
    first = blue.release("b1", "rec-b1")
    second = blue.release("b2", "rec-b2")

    # Then the first slot is green's to take (blue wakes nobody), the second is blue's next waiter
    assert first == []
    assert second == ["rec-b3"]


def test_a_release_wakes_only_the_waiters_it_made_eligible(make_budget: BudgetFactory) -> None:
    # Given two holders of 2 slots and two waiters; the first release woke w1, whose wake-up is still queued
    budget = make_budget("2", None)
    for name in ("n1", "n2", "w1", "w2"):
        budget.acquire(slot(name))
    assert budget.release("n1", "rec-n1") == ["rec-w1"]

    # When the second holder releases before w1 has taken its slot
    woken = budget.release("n2", "rec-n2")

    # Then only w2 is woken: w1 was woken by the first release (at 300 nodes, waking every eligible waiter on
    # every release sent a dozen wake-ups per hand-over, and the drain queue they flooded delayed them all)
    assert woken == ["rec-w2"]
    assert budget.acquire(slot("w1")).granted
    assert budget.acquire(slot("w2")).granted


def test_newcomers_that_free_no_slot_wake_nobody_though_they_change_who_is_first_in_line(
    make_budget: BudgetFactory, clock: FakeClock
) -> None:
    # Given 2 slots in all, both held, a1 (zone a) then b1 (zone b) waiting; a release freed one slot and woke
    # a1, first in line (zones tied, a1 oldest)
    budget = make_budget("2", None)
    for name, zone in (("h1", "a"), ("h2", "b"), ("a1", "a"), ("b1", "b")):
        clock.advance(1)
        budget.acquire(slot(name, zone))
    woken = [budget.release("h1", "rec-h1")]
    assert woken == [["rec-a1"]]

    # When newcomers of zones b and a ask in turn, before a1 has taken the slot: each changes the zone with
    # the most waiters left, so the first in line flips between b1 and a1, but none frees a slot
    for name, zone in (("b2", "b"), ("a2", "a"), ("b3", "b"), ("a3", "a")):
        clock.advance(1)
        decision = budget.acquire(slot(name, zone))
        assert not decision.granted
        woken.append(list(decision.wake))

    # Then they wake nobody: the one freed slot had its wake-up (before: each flip woke b1 or a1 again, 5
    # wake-ups for one slot; in the bursts benchmark 7 per slot freed, most of them finding the waiter gone on)
    assert woken == [["rec-a1"], [], [], [], []]
    # and a1, first in line again, takes the slot at that wake-up
    assert budget.acquire(slot("a1", "a")).granted


def test_a_release_passes_the_freed_slot_on_to_the_waiter_it_wakes_whose_ask_then_writes_nothing(
    make_budget: BudgetFactory, store: MemoryBudgetStore, clock: FakeClock, metrics: RecordingMetrics
) -> None:
    # Given a full budget of 1 and a node that has waited 20 s for it
    budget = make_budget("1", None)
    budget.acquire(slot("a1"))
    budget.acquire(slot("b1"))
    clock.advance(20)

    # When the holder releases
    woken = budget.release("a1", "rec-a1")
    written = store.version

    # Then its write grants the slot to the waiter it wakes: the woken ask finds it held and writes nothing
    # (before: the woken lifecycle's own read-modify-write of the shared document, which on a busy API server
    # was most of a hand-over, 409s and all), and the wait is measured by the write that ended it
    assert woken == ["rec-b1"]
    decision = budget.acquire(slot("b1"))
    assert (decision.granted, decision.reason) == (True, SlotReason.HELD)
    assert store.version == written
    assert metrics.values("BudgetWait") == [20]


def test_a_slot_passed_on_to_a_lifecycle_that_stopped_asking_frees_when_its_place_in_line_would_have_expired(
    make_budget: BudgetFactory, clock: FakeClock
) -> None:
    # Given a budget of 1 (TTL 60 s) held by a1, with b1 then c1 waiting
    budget = make_budget("1", None, ttl=timedelta(seconds=60))
    budget.acquire(slot("a1"))
    budget.acquire(slot("b1"))
    clock.advance(10)
    budget.acquire(slot("c1"))

    # When a1 releases 40 s after b1 last asked, passing the slot on to b1, whose lifecycle is gone (it never
    # asks again)
    clock.advance(30)
    assert budget.release("a1", "rec-a1") == ["rec-b1"]

    # Then the slot is b1's until b1's place in line would have expired (60 s after it last asked), not for a
    # whole TTL from the release; c1 then takes it
    clock.advance(19)
    assert not budget.acquire(slot("c1")).granted
    clock.advance(1)
    assert budget.acquire(slot("c1")).reason is SlotReason.GRANTED


def test_a_repeated_release_still_returns_the_waiters_to_wake(
    make_budget: BudgetFactory, clock: FakeClock
) -> None:
    # Given a release that passed its slot on to the waiter, whose wake-up message was lost in a crash
    budget = make_budget("1", None)
    budget.acquire(slot("n1"))
    budget.acquire(slot("n2"))
    clock.advance(5)
    assert budget.release("n1", "rec-n1") == ["rec-n2"]

    # When the release is delivered again, Then it wakes the same waiter, holding its slot since
    clock.advance(5)
    assert budget.release("n1", "rec-n1") == ["rec-n2"]
    # and once that lifecycle has renewed its slot, nobody: it was woken
    clock.advance(120)
    assert budget.renew(slot("n2")).reason is SlotReason.HELD
    assert budget.release("n1", "rec-n1") == []


def test_a_cleanup_after_the_sweeper_removed_its_slot_wakes_nobody_the_sweep_passed_its_slot_on_to(
    make_budget: BudgetFactory, clock: FakeClock
) -> None:
    # Given a budget of 1 held by n1 with w waiting, and the sweeper's removal of n1's slot (its node gone),
    # which passed the slot on to w and woke it
    budget = make_budget("1", None)
    budget.acquire(slot("n1"))
    budget.acquire(slot("w"))
    clock.advance(5)
    assert budget.sweep(stale=lambda entries: Verdict(stale=frozenset({"rec-n1"}))).wake == ("rec-w",)

    # When n1's lifecycle cleans up: its release removes nothing (it only marks the node given back)
    clock.advance(5)
    woken = budget.release("n1", "rec-n1")

    # Then it wakes nobody: w holds the slot, woken by the sweep (were that wake-up lost, w's own retry finds
    # the slot held); waking every lifecycle passed a slot and not renewed yet at each such release woke dozens
    # per termination once EC2's state changes, which follow every one, forget the instance
    assert woken == []


def test_an_instance_gone_outside_the_hooks_is_forgotten_and_its_slot_goes_to_the_next_waiter(
    make_budget: BudgetFactory, store: MemoryBudgetStore, clock: FakeClock
) -> None:
    # Given blue holding the one slot for instance i-n1 (its node n1) and n2 waiting, and green waiting too
    blue, green = make_budget("1", None, owner="blue"), make_budget("1", None, owner="green")
    blue.acquire(slot("n1"))
    blue.acquire(slot("n2"))
    green.acquire(slot("g1", owner="green"))

    # When i-n1 is terminated outside the hooks, and green asks the budget to forget it (another owner's)
    with pytest.raises(ValueError, match="owner 'green' asked the budget of 'blue'"):
        blue.forget("green", "i-n1")
    clock.advance(5)
    woken = blue.forget("blue", "i-n1")

    # Then blue's entries of the instance are gone (whichever lifecycle held them), and the next waiter in
    # line is passed the slot and woken: blue's n2 (first come, first served among the owners)
    assert woken == ["rec-n2"]
    doc = store.read()
    assert doc is not None
    assert [h.node for h in doc.holders] == ["n2"]
    assert [w.node for w in doc.waiters] == ["g1"]
    # and forgetting it again changes nothing, and wakes n2 again, which has not renewed the slot passed on to
    # it: a forget repeated after its wake-up was refused (the step failed) repairs it, not n2's own retry up to
    # 4 x BudgetRetrySeconds later (a lifecycle woken already finds itself moved on)
    assert blue.forget("blue", "i-n1") == ["rec-n2"]
    assert store.read() == doc
    # but not once n2's lifecycle has renewed it (it took it up: its renewal is written a third of the TTL on)
    clock.advance(100)
    assert blue.renew(slot("n2")).granted
    assert blue.forget("blue", "i-n1") == []


def test_instances_gone_one_after_another_wake_only_the_waiters_each_made_eligible(
    make_budget: BudgetFactory,
) -> None:
    # Given two holders of 2 slots and two waiters; the first instance gone woke w1, still queued
    budget = make_budget("2", None)
    for name in ("n1", "n2", "w1", "w2"):
        budget.acquire(slot(name))
    assert budget.forget("blue", "i-n1") == ["rec-w1"]

    # When the second holder's instance goes too (a Spot interruption takes many at once)
    # Then only w2 is woken, not w1 again
    assert budget.forget("blue", "i-n2") == ["rec-w2"]


def test_no_owner_releases_or_takes_a_slot_another_owner_holds(
    make_budget: BudgetFactory, store: MemoryBudgetStore
) -> None:
    blue, green = make_budget(owner="blue"), make_budget(owner="green")
    blue.acquire(slot("n1"))

    assert green.acquire(slot("n1", owner="green")).reason is SlotReason.HELD_BY_OTHER_OWNER
    green.release("n1", "rec-n1")

    doc = store.read()
    assert doc is not None
    assert [(h.node, h.owner) for h in doc.holders] == [("n1", "blue")]


@pytest.mark.parametrize("held", [True, False], ids=["holder", "waiter"])
def test_another_owners_entry_for_a_node_name_now_another_instances_is_stale(
    make_budget: BudgetFactory, store: MemoryBudgetStore, held: bool
) -> None:
    # Given blue's entry (a holder, or a waiter behind a full budget) for node n1 of instance i-old, whose
    # release was lost when i-old went; and green's new instance, given i-old's private IP, hence the node name
    blue, green = make_budget("1", None, owner="blue"), make_budget("2", None, owner="green")
    if not held:
        blue.acquire(slot("n0"))
    old = replace(slot("n1"), instance_id="i-old")
    assert blue.acquire(old).granted is held

    # When green's node of that name has a Spot interruption (its capacity goes in two minutes: forced)
    decision = green.acquire(replace(slot("n1", owner="green"), instance_id="i-new", force=True))

    # Then green drains its node now: blue's entry names a node gone with its instance
    assert decision.granted
    doc = store.read()
    assert doc is not None
    assert [(h.node, h.owner) for h in doc.holders if h.node == "n1"] == [("n1", "green")]
    assert not [w for w in doc.waiters if w.node == "n1"]


def test_a_waiter_that_gives_up_leaves_the_queue_and_its_slot_goes_to_the_next(
    make_budget: BudgetFactory,
) -> None:
    budget = make_budget("2", None)
    budget.acquire(slot("n1"))
    budget.acquire(slot("n2"))
    budget.acquire(slot("w1"))
    budget.acquire(slot("w2"))
    budget.release("n1", "rec-n1")  # the slot is w1's

    # its lifecycle ends while it still waits (the action timed out): its cleanup releases the node
    assert budget.release("w1", "rec-w1") == ["rec-w2"]


# --- several owners ----------------------------------------------------------------------------------


def test_each_owner_applies_its_own_limits_to_the_holders_of_all_owners(make_budget: BudgetFactory) -> None:
    # Given blue allowed 3 and green allowed 1, with blue holding 1
    blue, green = make_budget("3", None, owner="blue"), make_budget("1", None, owner="green")
    blue.acquire(slot("b1"))

    # When both ask for more
    # Then green is held to its share while blue may still go up to its own
    assert not green.acquire(slot("g1", owner="green")).granted
    assert blue.acquire(slot("b2")).granted


def test_owners_agree_on_who_is_next_when_one_counts_unavailable_nodes(
    make_budget: BudgetFactory, inventory: FakeInventory
) -> None:
    # Given a cluster with a node cordoned by hand, which only green counts, and limits of 2 for both
    inventory.nodes = [node("b1"), node("g1"), node("g2"), node("u1", schedulable=False)]
    blue = make_budget("2", None, owner="blue")
    green = make_budget("2", None, owner="green", count_unavailable=True)
    blue.acquire(slot("b1"))

    # When green's node asks first (its view is full: b1 + u1) and blue's younger node asks after
    assert not green.acquire(slot("g1", owner="green")).granted
    blue_decision = blue.acquire(slot("b2"))

    # Then blue knows green's waiter cannot go and takes the free slot instead of leaving it idle
    assert blue_decision.granted


def test_a_looser_owners_newcomer_does_not_take_the_room_a_stricter_owners_older_waiter_needs(
    make_budget: BudgetFactory, clock: FakeClock
) -> None:
    # Given green allowed 2 and blue allowed 3, green holding one node and green's g2 waiting first in line
    # (blue's b1 and b2 held a moment ago, one given back since)
    green, blue = make_budget("2", None, owner="green"), make_budget("3", None, owner="blue")
    assert green.acquire(slot("g1", owner="green")).granted
    assert blue.acquire(slot("b1")).granted
    assert not green.acquire(slot("g2", owner="green")).granted
    clock.advance(1)
    blue.release("b1", "rec-b1")

    # When blue's newcomer asks before g2's retry: the one free slot fits both, but only one of them
    clock.advance(1)
    newcomer = blue.acquire(slot("b2"))

    # Then it waits behind g2, first come first served across owners: granted, it would fill green's view
    # (g1 + b2 = 2) and leave g2 waiting though it asked first; g2 takes the slot at its retry
    assert (newcomer.granted, newcomer.reason) == (False, SlotReason.NO_ROOM), newcomer
    clock.advance(30)
    assert green.acquire(slot("g2", owner="green")).granted
    assert blue.acquire(slot("b2")).granted  # and blue's 3 still leave room for it then


# --- nodes unavailable for other reasons -----------------------------------------------------------------


def test_a_cordoned_or_not_ready_node_nobody_holds_counts_against_the_limits(
    make_budget: BudgetFactory, inventory: FakeInventory
) -> None:
    # Given zone a with a node cordoned by hand and one NotReady, zone b healthy, limits 3 / 2 per zone
    inventory.nodes = [node("a1"), node("a2", schedulable=False), node("a3", ready=False), node("b1", "b")]
    budget = make_budget("3", "2", count_unavailable=True)

    # When a node of each zone asks
    # Then zone a is full already, and zone b gets the last slot of the cluster
    assert not budget.acquire(slot("a1", "a")).granted
    assert budget.acquire(slot("b1", "b")).granted


def test_a_node_already_unavailable_takes_its_slot_without_counting_twice(
    make_budget: BudgetFactory, inventory: FakeInventory
) -> None:
    # Given a full budget of 1 whose only unavailable node is the one asking (cordoned by a drain that lost
    # its holder, or by hand before its instance was terminated)
    inventory.nodes = [node("n1", schedulable=False), node("n2")]
    budget = make_budget("1", None, count_unavailable=True)

    # When it asks, Then it gets the slot: granting it disrupts nothing more
    assert budget.acquire(slot("n1")).granted
    assert not budget.acquire(slot("n2")).granted


def test_a_drained_node_does_not_count_as_unavailable_after_its_release(
    make_budget: BudgetFactory, inventory: FakeInventory, clock: FakeClock
) -> None:
    # Given a drained node, still cordoned after its release while its instance terminates
    inventory.nodes = [node("n1", schedulable=False), node("n2")]
    budget = make_budget("1", None, count_unavailable=True, ttl=timedelta(seconds=60))
    budget.acquire(slot("n1"))
    budget.release("n1", "rec-n1")

    # When the next node asks at once, Then the freed slot is its
    assert budget.acquire(slot("n2")).granted
    budget.release("n2", "rec-n2")

    # But a node still cordoned a TTL after its release is unavailable for some other reason, and counts
    clock.advance(61)
    assert not budget.acquire(slot("n2")).granted


def test_a_node_whose_stuck_holder_an_operator_released_counts_as_unavailable_whoever_released_it_before(
    make_budget: BudgetFactory, inventory: FakeInventory, store: MemoryBudgetStore, clock: FakeClock
) -> None:
    # Given n1 drained and given back by one lifecycle of its instance, then held by the next one, whose drain
    # is stuck with the node cordoned
    inventory.nodes = [node("n1", schedulable=False), node("n2")]
    budget = make_budget("1", None, count_unavailable=True)
    budget.acquire(slot("n1"))
    budget.release("n1", "rec-n1")
    assert budget.acquire(replace(slot("n1"), record_id="rec-n1-next")).granted

    # When an operator releases that stuck holder (`nodecycle budget release`)
    doc = store.read()
    assert doc is not None
    stuck = doc.holder("n1")
    assert stuck is not None
    store.text = force_release(doc, stuck, clock.now()).to_json()

    # Then the node, still cordoned, counts as unavailable: the next node waits
    clock.advance(1)
    assert not budget.acquire(slot("n2")).granted


def test_an_operators_release_of_a_stuck_holder_leaves_the_lifecycle_that_gave_the_node_back_refused(
    make_budget: BudgetFactory, inventory: FakeInventory, store: MemoryBudgetStore, clock: FakeClock
) -> None:
    # Given n1 drained and given back by one lifecycle of its instance, then held by the next one, whose drain
    # is stuck with the node cordoned
    inventory.nodes = [node("n1", schedulable=False), node("n2")]
    budget = make_budget("1", None, count_unavailable=True)
    earlier = replace(slot("n1"), token="t1")
    assert budget.acquire(earlier).granted
    budget.release("n1", "rec-n1", "t1")
    assert budget.acquire(replace(slot("n1"), record_id="rec-n1-next", token="t2")).granted

    # When an operator releases that stuck holder (`nodecycle budget release`), and a late delivery of one of
    # the earlier lifecycle's steps asks for the slot (its commit will lose)
    doc = store.read()
    assert doc is not None
    stuck = doc.holder("n1")
    assert stuck is not None
    store.text = force_release(doc, stuck, clock.now()).to_json()
    clock.advance(1)
    late = budget.acquire(earlier)

    # Then that lifecycle is still refused, as one that gave its slot back (it would hold a slot nothing gives
    # back); and the node, still cordoned by the stuck drain, counts as unavailable: the next node waits
    assert late.reason is SlotReason.RELEASED
    assert not budget.acquire(slot("n2")).granted


def test_integer_limits_without_unavailable_counting_never_list_nodes(
    make_budget: BudgetFactory, inventory: FakeInventory
) -> None:
    budget = make_budget("2", "1")
    budget.acquire(slot("n1"))
    budget.release("n1", "rec-n1")
    assert inventory.calls == 0


def test_holders_of_nodes_out_of_scope_still_count(
    make_budget: BudgetFactory, inventory: FakeInventory
) -> None:
    # Given 50% of a scope of 2 nodes (1 slot), and another owner holding a node outside that scope
    inventory.nodes = [node("n1"), node("n2")]
    make_budget("5", None, owner="green").acquire(slot("g1", owner="green"))

    # When a node in scope asks, Then the outside holder took the only slot
    assert not make_budget("50%", None).acquire(slot("n1")).granted


# --- conflicts, metrics --------------------------------------------------------------------------------


def test_a_write_that_loses_a_race_is_decided_again_on_the_new_document(
    make_budget: BudgetFactory, store: MemoryBudgetStore, metrics: RecordingMetrics
) -> None:
    # Given a budget of 1, and another owner taking the slot between our read and our write
    blue, green = make_budget("1", None, owner="blue"), make_budget("1", None, owner="green")
    store.interleave(lambda: green.acquire(slot("g1", owner="green")))

    # When blue acquires
    decision = blue.acquire(slot("b1"))

    # Then blue's decision is made again after the conflict: it waits; the retry is counted
    assert not decision.granted
    assert metrics.values("BudgetConflicts") == [1]


def test_conflicts_that_do_not_let_up_are_a_transient_error(
    make_budget: BudgetFactory, store: MemoryBudgetStore, metrics: RecordingMetrics
) -> None:
    before = store.text
    store.conflicts(store.max_attempts)
    with pytest.raises(TransientError):
        make_budget().acquire(slot("n1"))
    assert store.text == before  # nothing of this acquire was written
    assert metrics.values("BudgetConflicts") == [store.max_attempts - 1]


def test_the_wait_is_measured_from_joining_the_queue_to_the_grant(
    make_budget: BudgetFactory, clock: FakeClock, metrics: RecordingMetrics
) -> None:
    budget = make_budget("1", None)
    budget.acquire(slot("n1"))
    budget.acquire(slot("n2"))
    clock.advance(30)
    budget.acquire(slot("n2"))
    clock.advance(12)
    budget.release("n1", "rec-n1")
    assert budget.acquire(slot("n2")).reason is SlotReason.HELD

    # (measured by the release, which passed the slot on to n2)
    assert metrics.values("BudgetWait") == [42]
    # n2's retry 30 s after joining writes nothing: its place is fresh (renewed less than a third of the
    # 300 s TTL ago) and it still gets no slot; nor does its woken ask: the slot is held for it already
    assert metrics.values("BudgetHolders") == [1, 1, 1]


# --- expired holders: the write that removes one wakes the waiters it made eligible ----------------------


def _a_holder_that_went_quiet(
    make_budget: BudgetFactory, clock: FakeClock, total: str, per_zone: str | None, waiters: list[str]
) -> DisruptionBudget:
    """Blue's budget (TTL 300 s) with x (zone a) and y (zone b) holding, ``waiters`` (``node:zone``) waiting
    in that order; x's drain died at once, while y and the waiters kept asking until x's TTL passed a second
    ago (each last written 101 s ago, so y's next renewal is written)."""
    budget = make_budget(total, per_zone)
    assert budget.acquire(slot("x", "a")).granted
    assert budget.acquire(slot("y", "b")).granted
    queued = [slot(entry.split(":")[0], entry.split(":")[1]) for entry in waiters]
    for request in queued:
        assert not budget.acquire(request).granted
    clock.advance(200)
    assert budget.renew(slot("y", "b")).granted
    for request in queued:
        assert not budget.acquire(request).granted
    clock.advance(101)
    return budget


def test_a_renewal_that_removes_an_expired_holder_wakes_the_waiter_it_made_eligible_in_its_zone(
    make_budget: BudgetFactory, clock: FakeClock
) -> None:
    # Given 3 slots, 1 per zone: x (zone a) held and expired, y (zone b) held, and wb (zone b) then wa
    # (zone a) waiting
    budget = _a_holder_that_went_quiet(make_budget, clock, "3", "1", ["wb:b", "wa:a"])

    # When y's drain renews its slot (written: its last renewal is a third of the TTL old), removing x
    decision = budget.renew(slot("y", "b"))

    # Then wa, whose zone x's slot was in, is woken; not wb (zone b is y's), nor y itself (before: nobody was
    # woken, and wa waited for its own retry, the slot idle up to BudgetRetrySeconds)
    assert decision.granted
    assert decision.wake == ("rec-wa",)


def test_a_newcomer_that_removes_an_expired_holder_wakes_the_waiter_it_made_eligible_not_itself(
    make_budget: BudgetFactory, clock: FakeClock
) -> None:
    # Given 3 slots, 1 per zone: x (zone a) expired, y (zone b) held, and wa (zone a) waiting
    budget = _a_holder_that_went_quiet(make_budget, clock, "3", "1", ["wa:a"])

    # When a newcomer of zone c asks, removing x
    decision = budget.acquire(slot("n", "c"))

    # Then it is granted (wa and it fit), and wa is woken, not the newcomer
    assert (decision.granted, decision.wake) == (True, ("rec-wa",))


def test_a_drain_that_expired_and_lost_its_slot_wakes_the_waiter_its_removal_made_eligible(
    make_budget: BudgetFactory, clock: FakeClock
) -> None:
    # Given blue's 2 slots, 1 per zone: blue's x (zone a) held, green's a2 (zone a) held under green's own
    # limits (3, no zone limit), and blue's wc (zone c) waiting, all asking until x's TTL passed
    blue, green = make_budget("2", "1"), make_budget("3", None, owner="green")
    assert blue.acquire(slot("x", "a")).granted
    assert green.acquire(slot("a2", "a", owner="green")).granted
    assert not blue.acquire(slot("wc", "c")).granted
    clock.advance(200)
    assert green.renew(slot("a2", "a", owner="green")).granted
    assert not blue.acquire(slot("wc", "c")).granted
    clock.advance(101)

    # When x's drain renews (a drain in progress), its expired holder removed by its own write
    decision = blue.renew(replace(slot("x", "a"), in_progress=True))

    # Then x waits (zone a is a2's), and wc, for which x's removal left room, is woken
    assert (decision.granted, decision.reason) == (False, SlotReason.LOST)
    assert decision.wake == ("rec-wc",)


def test_a_write_that_removes_an_expired_holder_leaves_another_owners_waiter_to_its_own_retry(
    make_budget: BudgetFactory, clock: FakeClock
) -> None:
    # Given 2 slots, x (blue) expired, y (blue) held, then green's g and blue's w waiting
    blue = make_budget("2", None)
    green = make_budget("2", None, owner="green")
    assert blue.acquire(slot("x")).granted
    assert blue.acquire(slot("y")).granted
    assert not green.acquire(slot("g", owner="green")).granted
    assert not blue.acquire(slot("w")).granted
    clock.advance(200)
    assert blue.renew(slot("y")).granted
    assert not green.acquire(slot("g", owner="green")).granted
    assert not blue.acquire(slot("w")).granted
    clock.advance(101)

    # When y's renewal removes x
    decision = blue.renew(slot("y"))

    # Then x's slot is g's (first in line), which blue does not wake (as a release does not: each stack
    # wakes its own waiters, through its own queue), and w, behind it, is not eligible
    assert decision.wake == ()
    assert green.acquire(slot("g", owner="green")).granted


def test_a_write_that_removes_an_expired_holder_under_a_looser_percent_wakes_every_waiter_it_made_eligible(
    make_budget: BudgetFactory, clock: FakeClock, inventory: FakeInventory
) -> None:
    # Given 10% of 20 nodes (2 slots): x expired, y held, w1 then w2 waiting; as stored, nobody is eligible
    inventory.nodes = [node(f"n{i}") for i in range(20)]
    budget = _a_holder_that_went_quiet(make_budget, clock, "10%", None, ["w1:a", "w2:a"])

    # When 10 nodes join the scope (10% of 30: 3 slots) and y's renewal is written, removing x
    inventory.nodes += [node(f"m{i}") for i in range(10)]
    decision = budget.renew(slot("y", "b"))

    # Then both waiters are woken, first in line first: neither was eligible as the document was stored, so
    # nobody woke either (before: only w2; w1 counted as eligible already, under the limits resolved now)
    assert decision.wake == ("rec-w1", "rec-w2")


def test_a_release_that_also_removes_an_expired_holder_wakes_the_waiters_both_made_eligible(
    make_budget: BudgetFactory, clock: FakeClock
) -> None:
    # Given 2 slots: x expired, y held, w1 and w2 waiting
    budget = _a_holder_that_went_quiet(make_budget, clock, "2", None, ["w1:a", "w2:a"])

    # When y releases, its write removing x too
    woken = budget.release("y", "rec-y")

    # Then both waiters are woken (before: only w2, the one y's release made eligible; w1, made eligible by
    # x's removal, waited for its retry)
    assert woken == ["rec-w1", "rec-w2"]


@pytest.mark.parametrize("asking", ["y", "w2"], ids=["holder-renewing", "waiter-retrying"])
def test_a_request_with_nothing_to_renew_yet_writes_the_removal_of_an_expired_holder_and_wakes(
    make_budget: BudgetFactory, clock: FakeClock, store: MemoryBudgetStore, asking: str
) -> None:
    # Given 2 slots: x expired a second ago, y held and w1, w2 waiting, all three written 51 s ago (less than
    # a third of the TTL: their next asks have nothing to renew)
    budget = make_budget("2", None)
    for name in ("x", "y", "w1", "w2"):
        budget.acquire(slot(name))
    clock.advance(250)
    for name in ("y", "w1", "w2"):
        budget.acquire(slot(name))
    clock.advance(51)

    # When y's drain polls (a renewal), or w2 asks again at its retry
    decision = (budget.renew if asking == "y" else budget.acquire)(slot(asking))

    # Then the request writes x's removal and wakes w1, which it made eligible (before: nothing was written,
    # x stayed in the document, and w1 waited for its own retry or another write), passing x's slot on to it
    assert decision.wake == ("rec-w1",)
    doc = store.read()
    assert doc is not None
    assert [h.node for h in doc.holders] == ["y", "w1"]


def test_the_sweepers_removal_of_an_expired_holder_wakes_the_waiter_it_made_eligible(
    make_budget: BudgetFactory, clock: FakeClock
) -> None:
    # Given 2 slots: x expired, y held, w waiting
    budget = _a_holder_that_went_quiet(make_budget, clock, "2", None, ["w:a"])

    # When the sweeper runs (nothing of blue's is stale but x's expiry)
    result = budget.sweep(stale=lambda entries: Verdict())

    # Then w is woken
    assert result.wake == ("rec-w",)


# --- sweeper, snapshot ------------------------------------------------------------------------------


def test_the_sweeper_removes_its_own_stale_entries_only_and_wakes_the_next(
    make_budget: BudgetFactory, store: MemoryBudgetStore, metrics: RecordingMetrics
) -> None:
    # Given blue holding n1 and n2 (budget full), green holding g1, and blue's w1 waiting
    blue, green = make_budget("3", None, owner="blue"), make_budget("3", None, owner="green")
    blue.acquire(slot("n1"))
    blue.acquire(slot("n2"))
    green.acquire(slot("g1", owner="green"))
    blue.acquire(slot("w1"))
    asked: list[str] = []

    def stale(
        entries: Sequence[Holder | Waiter],
    ) -> Verdict:  # the sweeper: n1's and g1's instances are gone
        asked.extend(entry.node for entry in entries)
        return Verdict(stale=frozenset(entry.record_id for entry in entries if entry.node in {"n1", "g1"}))

    # When blue's sweeper runs
    result = blue.sweep(stale=stale)

    # Then only blue's entries were judged, n1 is gone, its slot passed on to w1, which is woken, and green's
    # holder is untouched
    assert sorted(asked) == ["n1", "n2", "w1"]
    assert [h.node for h in result.holders] == ["n1"]
    assert result.wake == ("rec-w1",)
    doc = store.read()
    assert doc is not None
    assert sorted(h.node for h in doc.holders) == ["g1", "n2", "w1"]
    assert metrics.values("SweptHolders") == [1]


def test_the_snapshot_shows_holders_waiters_and_limits_per_zone(
    make_budget: BudgetFactory, clock: FakeClock, inventory: FakeInventory
) -> None:
    inventory.nodes = [node("a1", "a"), node("a2", "a"), node("b1", "b")]
    budget = make_budget("2", "50%")
    budget.acquire(slot("a1", "a"))
    clock.advance(10)
    budget.acquire(slot("a2", "a"))
    clock.advance(5)

    view = budget.snapshot()

    assert [(h.node, h.held_seconds, h.expires_in_seconds) for h in view.holders] == [("a1", 15, 285)]
    assert [(w.position, w.node, w.waiting_seconds, w.eligible) for w in view.waiters] == [
        (1, "a2", 5, False)
    ]
    assert [(z.zone, z.holders, z.waiters, z.limits) for z in view.zones] == [
        ("a", 1, 1, {"blue": 1}),
        ("b", 0, 0, {"blue": 1}),
    ]
    assert (view.limits[0].total, view.limits[0].nodes_in_scope) == (2, 3)


# --- renewals and writes ---------------------------------------------------------------------------------


def test_a_renewal_within_a_third_of_the_ttl_writes_nothing_and_a_later_one_is_written(
    make_budget: BudgetFactory, store: MemoryBudgetStore, clock: FakeClock
) -> None:
    # Given a holder with a TTL of 300 s
    budget = make_budget()
    budget.acquire(slot("n1"))
    version = store.version

    # When its drain renews at every step, every 5 s for 95 s, Then nothing is written
    for _ in range(19):
        clock.advance(5)
        assert budget.renew(slot("n1")).reason is SlotReason.HELD
    assert store.version == version

    # When it renews 100 s (a third of its TTL) after its last written renewal, Then that renewal is written
    clock.advance(5)
    budget.renew(slot("n1"))
    doc = store.read()
    assert doc is not None
    assert store.version == version + 1
    assert doc.holders[0].renewed_at == clock.now()


def test_a_second_lifecycle_of_the_held_instance_waits_for_the_first_to_release_its_slot(
    make_budget: BudgetFactory, store: MemoryBudgetStore
) -> None:
    # Given a budget of one, n1 held by its instance's drain (a terminate hook's), and n2 waiting
    budget = make_budget("1", None)
    budget.acquire(slot("n1"))
    assert not budget.acquire(slot("n2")).granted

    # When another lifecycle of the same instance asks for n1's slot (a rebalance drain)
    second = replace(slot("n1"), record_id="rec-n1-rebalance")
    decision = budget.acquire(second)

    # Then it does not take the holder over, so that when its cleanup releases the node, nothing is freed
    # while the first still drains
    assert not decision.granted
    budget.release("n1", "rec-n1-rebalance")
    doc = store.read()
    assert doc is not None
    assert [(h.node, h.record_id) for h in doc.holders] == [("n1", "rec-n1")]
    assert not budget.acquire(slot("n2")).granted
    assert decision.reason is SlotReason.HELD_BY_OTHER_LIFECYCLE
    # while a Spot interruption of the instance drains at once within the slot the node holds (its two
    # minutes cannot wait), without renaming it: its own release frees nothing either
    spot = replace(slot("n1"), record_id="rec-n1-spot", force=True)
    assert budget.acquire(spot).granted
    budget.release("n1", "rec-n1-spot")
    assert not budget.acquire(slot("n2")).granted
    # and once the first releases it, the slot is the next one's
    budget.release("n1", "rec-n1")
    assert budget.acquire(slot("n2")).granted


def test_the_release_of_a_node_wakes_its_instances_other_lifecycle_once_it_made_it_eligible(
    make_budget: BudgetFactory, store: MemoryBudgetStore, clock: FakeClock
) -> None:
    # Given a budget of one: n1 held by its instance's terminate drain, n2 waiting, then a rebalance drain of
    # n1's instance asking for n1's slot, and again at its retry
    budget = make_budget("1", None)
    budget.acquire(slot("n1"))
    assert not budget.acquire(slot("n2")).granted
    rebalance = replace(slot("n1"), record_id="rec-n1-rebalance")
    clock.advance(1)
    assert budget.acquire(rebalance).reason is SlotReason.HELD_BY_OTHER_LIFECYCLE
    version = store.version
    clock.advance(30)
    assert budget.acquire(rebalance).reason is SlotReason.HELD_BY_OTHER_LIFECYCLE
    retry_writes = store.version - version

    # When the terminate drain releases n1, Then n2 is woken (first in line), not the rebalance
    assert budget.release("n1", "rec-n1") == ["rec-n2"]
    assert budget.acquire(slot("n2")).granted
    # and when n2's drain releases, the rebalance is woken, and takes n1's slot
    assert budget.release("n2", "rec-n2") == ["rec-n1-rebalance"]
    assert budget.acquire(rebalance).granted
    # and its retry in line did not rewrite the document, as any waiter's
    assert retry_writes == 0


def test_a_forced_lifecycle_draining_within_its_instances_held_slot_leaves_the_line(
    make_budget: BudgetFactory, store: MemoryBudgetStore, clock: FakeClock
) -> None:
    # Given n1 held by its instance's terminate drain, and a maintenance of the instance in line for the node
    budget = make_budget("1", None)
    budget.acquire(slot("n1"))
    maintenance = replace(slot("n1"), record_id="rec-n1-maintenance")
    assert budget.acquire(maintenance).reason is SlotReason.HELD_BY_OTHER_LIFECYCLE

    # When that maintenance is too near to wait (forced), Then it drains within the slot the node holds, out of
    # the line: the terminate drain's release wakes nobody for it
    clock.advance(1)
    assert budget.acquire(replace(maintenance, force=True)).reason is SlotReason.HELD
    doc = store.read()
    assert doc is not None
    assert (doc.waiters, [h.record_id for h in doc.holders]) == ((), ["rec-n1"])
    assert budget.release("n1", "rec-n1") == []


def test_a_late_delivery_of_a_lifecycle_whose_slot_was_given_back_takes_no_slot_again(
    make_budget: BudgetFactory, store: MemoryBudgetStore, clock: FakeClock
) -> None:
    # Given a budget of one, and n1's lifecycle done: it took the slot, drained, and its cleanup released it
    budget = make_budget("1", None)
    assert budget.acquire(slot("n1")).granted
    budget.release("n1", "rec-n1")

    # When a late delivery of its earlier steps asks again (a duplicate ACQUIRE_SLOT whose write lost to the
    # whole lifecycle and was retried on the document after the release; a stale EVICT renewing), a few
    # seconds later
    clock.advance(3)
    late = budget.acquire(slot("n1"))
    renewed = budget.renew(slot("n1"))

    # Then neither takes a slot (no commit of theirs will say so, and nothing would give it back): the next
    # node gets it
    assert (late.granted, renewed.granted) == (False, False)
    assert late.reason is SlotReason.RELEASED
    doc = store.read()
    assert doc is not None
    assert (doc.holders, doc.waiters) == ((), ())
    assert budget.acquire(slot("n2")).granted
    # and a new lifecycle of the node (another record) is not refused for the old one's release
    budget.release("n2", "rec-n2")
    assert budget.acquire(replace(slot("n1"), record_id="rec-n1-next")).granted


def test_a_lifecycle_that_starts_over_on_the_same_record_is_not_refused_for_the_last_ones_release(
    make_budget: BudgetFactory, clock: FakeClock
) -> None:
    # Given a Spot interruption's drain of n1 (one record per instance and cause), over: its slot given back
    budget = make_budget("1", None)
    first = replace(slot("n1"), token="interruption-1")
    assert budget.acquire(first).granted
    budget.release("n1", first.record_id)

    # When the instance, started again, is interrupted again minutes later: the record starts over under the
    # new warning, whose drain cannot wait (forced)
    clock.advance(120)
    again = budget.acquire(replace(first, token="interruption-2", force=True))

    # Then it takes its slot; and once it gave it back, a late delivery of its own does not
    assert again.granted
    budget.release("n1", first.record_id)
    assert budget.acquire(replace(first, token="interruption-2")).reason is SlotReason.RELEASED


def test_a_waiter_is_judged_against_the_limits_its_owner_resolves_now_not_those_it_last_wrote(
    make_budget: BudgetFactory, inventory: FakeInventory, clock: FakeClock
) -> None:
    # Given a limit of 1 counting unavailable nodes, taken by a node an operator cordoned, and n1 waiting
    inventory.nodes = [node("manual", schedulable=False), node("n1"), node("n2")]
    budget = make_budget("1", None, count_unavailable=True)
    assert budget.acquire(slot("n1")).reason is SlotReason.NO_ROOM

    # When the operator uncordons it, and the waiter asks again at its next retry, well within a third of
    # the TTL since its entry was written (which would otherwise skip the write)
    inventory.nodes = [node("manual"), node("n1"), node("n2")]
    clock.advance(30)

    # Then the free slot is its at once, not when its entry next needs renewing
    assert budget.acquire(slot("n1")).granted


def test_a_redeploy_that_raises_the_limit_lets_a_waiter_go_at_its_next_retry(
    make_budget: BudgetFactory, clock: FakeClock
) -> None:
    # Given a limit of 1, held, with a waiter
    old = make_budget("1", None)
    assert old.acquire(slot("n1")).granted
    assert not old.acquire(slot("n2")).granted

    # When the stack is updated to 2 and the waiter asks again at its next retry
    clock.advance(30)

    # Then it takes the second slot at once
    assert make_budget("2", None).acquire(slot("n2")).granted


def test_waiters_retrying_through_containers_with_different_node_caches_do_not_rewrite_the_document(
    store: MemoryBudgetStore, clock: FakeClock, make_budget: BudgetFactory, inventory: FakeInventory
) -> None:
    # Given two drain containers of one stack counting unavailable nodes, whose node caches differ by a
    # replacement node that registered between their lists; a budget of 2 held, and eight nodes waiting
    inventory.nodes = [node(f"n{i}") for i in range(12)]
    first = make_budget("2", None, count_unavailable=True)
    assert first.acquire(slot("n0")).granted
    assert first.acquire(slot("n1")).granted
    waiters = [f"n{i}" for i in range(2, 10)]
    for name in waiters:
        assert not first.acquire(slot(name)).granted
    listed_later = FakeInventory([*inventory.nodes, node("new")])
    second = make_budget("2", None, count_unavailable=True, nodes=listed_later)
    before = store.version

    # When the waiters retry within a few seconds, handed to either container, and none gets a slot
    for turn, name in enumerate(waiters):
        clock.advance(1)
        assert not (first if turn % 2 else second).acquire(slot(name)).granted

    # Then the shared document is not rewritten at every retry (as each container's view of the nodes won)
    assert store.version - before == 0


def test_an_owner_whose_limit_dropped_leaves_the_free_slot_to_another_owners_waiter_at_its_retry(
    make_budget: BudgetFactory, clock: FakeClock
) -> None:
    # Given green draining two nodes, blue's x1 waiting first in line, then green's y2 (limits 2 each)
    green = make_budget("2", None, owner="green")
    assert green.acquire(slot("y0", owner="green")).granted
    assert green.acquire(slot("y1", owner="green")).granted
    assert not make_budget("2", None).acquire(slot("x1")).granted
    clock.advance(1)
    assert not green.acquire(slot("y2", owner="green")).granted

    # When blue is redeployed with a limit of 1, green's y0 is done, and each waiter asks again at its retry
    blue = make_budget("1", None)
    clock.advance(10)
    green.release("y0", "rec-y0")
    clock.advance(30)
    assert not blue.acquire(slot("x1")).granted  # blue's one slot is taken by y1
    decision = green.acquire(slot("y2", owner="green"))

    # Then y2 takes the free slot at once: every owner replays blue's waiter under blue's limit of now
    assert decision.granted, decision


def test_a_holder_renewed_by_its_lifecycle_under_a_new_token_is_released_under_it(
    make_budget: BudgetFactory, clock: FakeClock
) -> None:
    # Given n1 held by a maintenance lifecycle, which EC2's earlier start then took over (a new token), and
    # renewed a moment later, well within a third of the TTL
    budget = make_budget("1", None)
    budget.acquire(replace(slot("n1"), token="retirement"))
    clock.advance(5)
    assert budget.renew(replace(slot("n1"), token="reboot")).granted

    # When its lifecycle gives the slot back, and the retirement's lifecycle follows on the record
    budget.release("n1", "rec-n1")

    # Then that one (its token is not the releaser's) takes a slot at once; a late delivery of the releaser not
    assert budget.acquire(replace(slot("n1"), token="retirement")).granted
    budget.release("n1", "rec-n1")
    assert budget.acquire(replace(slot("n1"), token="retirement")).reason is SlotReason.RELEASED


def test_two_lifecycles_waiting_for_their_instances_node_are_woken_in_turn(
    make_budget: BudgetFactory,
) -> None:
    # Given a budget of one: n1 held by the drain for a rebalance recommendation of its instance, and two more
    # lifecycles of the instance (a maintenance, then its terminate hook) asking for the node in turn, each
    # asking again at its retry
    budget = make_budget("1", None)
    rebalance = replace(slot("n1"), record_id="rec-n1-rebalance", token="t1")
    maintenance = replace(slot("n1"), record_id="rec-n1-maintenance", token="t2")
    terminate = replace(slot("n1"), record_id="rec-n1-terminate", token="t3")
    assert budget.acquire(rebalance).granted
    asked = [budget.acquire(r).reason for r in (maintenance, terminate, maintenance, terminate)]

    # When the rebalance drain gives the slot back, and then the lifecycle it woke, once it took it
    woken = budget.release("n1", "rec-n1-rebalance", "t1")
    assert budget.acquire(maintenance).granted
    assert budget.acquire(terminate).reason is SlotReason.HELD_BY_OTHER_LIFECYCLE
    then = budget.release("n1", "rec-n1-maintenance", "t2")

    # Then each waits its turn, first come first woken: the later one does not take the first one's place in
    # line, woken in its stead
    assert asked == [SlotReason.HELD_BY_OTHER_LIFECYCLE] * 4
    assert (woken, then) == (["rec-n1-maintenance"], ["rec-n1-terminate"])


def test_a_late_delivery_of_a_lifecycle_is_refused_after_its_instances_next_lifecycle_held_the_node(
    make_budget: BudgetFactory, clock: FakeClock
) -> None:
    # Given a budget of one: n1 held by the drain for a rebalance recommendation of its instance, and a
    # maintenance of the instance in line for the node
    budget = make_budget("1", None)
    rebalance = replace(slot("n1"), record_id="rec-n1-rebalance")
    maintenance = replace(slot("n1"), record_id="rec-n1-maintenance")
    assert budget.acquire(rebalance).granted
    assert budget.acquire(maintenance).reason is SlotReason.HELD_BY_OTHER_LIFECYCLE

    # When the rebalance drain gives the slot back and the maintenance takes it; a late delivery of one of the
    # rebalance drain's steps asks for it then, and again once the maintenance's drain (of a node drained
    # already: seconds) gave it back
    clock.advance(1)
    assert budget.release("n1", "rec-n1-rebalance") == ["rec-n1-maintenance"]
    assert budget.acquire(maintenance).granted
    while_held = budget.acquire(rebalance)
    clock.advance(1)
    woken = budget.release("n1", "rec-n1-maintenance")
    after = budget.acquire(rebalance)

    # Then it is refused each time, as the lifecycle that gave its slot back: it holds no slot, and waits in no
    # line, that nothing would give back; the next node takes the slot
    assert [while_held.reason, after.reason] == [SlotReason.RELEASED, SlotReason.RELEASED]
    assert woken == []
    assert budget.acquire(slot("n2")).granted


def test_a_drain_whose_instance_was_forgotten_is_not_refused_as_if_it_had_released(
    make_budget: BudgetFactory, clock: FakeClock
) -> None:
    # Given n1's drain holding its slot when its instance is stopped outside the hooks (FORGET_NODE frees
    # what it held at once)
    budget = make_budget("1", None)
    assert budget.acquire(slot("n1")).granted
    budget.forget("blue", "i-n1")

    # When the drain, still running, renews at its next poll (it has yet to see its instance stopped)
    clock.advance(5)
    renewed = budget.renew(slot("n1"))

    # Then it is told as any drain that lost its slot (taken again when there is room), not refused as the
    # lifecycle that gave it back: it goes on to find its instance gone and settle
    assert renewed.reason is SlotReason.REACQUIRED


def test_a_forgotten_lifecycle_that_then_cleaned_up_takes_no_slot_again_but_its_instances_next_one_does(
    make_budget: BudgetFactory, clock: FakeClock
) -> None:
    # Given n1's drain (into the warm pool) holding its slot when its instance is stopped: the stop frees it
    # (FORGET_NODE) before the drain's own cleanup gives the slot back
    budget = make_budget("1", None)
    drain = replace(slot("n1"), token="t1")
    assert budget.acquire(drain).granted
    budget.forget("blue", "i-n1")
    clock.advance(1)
    budget.release("n1", "rec-n1", "t1")

    # When a late delivery of one of that lifecycle's steps asks for the slot (its commit will lose)
    clock.advance(1)
    late = (budget.acquire(drain), budget.renew(replace(drain, in_progress=True)))

    # Then it is refused as any lifecycle that gave its slot back; while the instance's next lifecycle (back
    # from the pool, another action) takes the slot
    assert [d.reason for d in late] == [SlotReason.RELEASED, SlotReason.RELEASED]
    assert budget.acquire(replace(drain, record_id="rec-n1-next", token="t2")).granted


def test_a_forgotten_lifecycle_is_refused_after_its_cleanup_though_another_lifecycle_cleaned_up_first(
    make_budget: BudgetFactory, clock: FakeClock
) -> None:
    # Given n1 held by the drain for a rebalance recommendation of its instance, with the instance's terminate
    # hook in line for the node, when the instance is stopped: the stop frees both (FORGET_NODE)
    budget = make_budget("1", None)
    rebalance = replace(slot("n1"), record_id="rec-n1-rebalance", token="t1")
    terminate = replace(slot("n1"), record_id="rec-n1-terminate", token="t2")
    assert budget.acquire(rebalance).granted
    assert budget.acquire(terminate).reason is SlotReason.HELD_BY_OTHER_LIFECYCLE
    budget.forget("blue", "i-n1")

    # When the terminate hook's lifecycle cleans up first, then the rebalance drain's; and a late delivery of
    # one of the rebalance drain's steps asks for the slot (its commit will lose)
    clock.advance(1)
    budget.release("n1", "rec-n1-terminate", "t2")
    clock.advance(1)
    budget.release("n1", "rec-n1-rebalance", "t1")
    clock.advance(1)
    late = budget.acquire(rebalance)

    # Then it is refused, as the lifecycle whose slot the stop removed and that then gave it back: the other
    # lifecycle's cleanup did not take that removal's mark from it; the next node takes the slot
    assert late.reason is SlotReason.RELEASED
    assert budget.acquire(slot("n2")).granted


def test_waiters_retrying_through_containers_that_resolve_a_percent_differently_do_not_rewrite_the_document(
    store: MemoryBudgetStore, clock: FakeClock, make_budget: BudgetFactory, inventory: FakeInventory
) -> None:
    # Given a total of 2 and 50% per zone, held; two containers whose node caches differ by a replacement node
    # that registered in zone b between their lists (4 nodes there: 2; 5: 3), and eight nodes waiting
    inventory.nodes = [node(f"n{i}", "a") for i in range(12)] + [node(f"m{i}", "b") for i in range(4)]
    first = make_budget("2", "50%")
    assert first.acquire(slot("n0")).granted
    assert first.acquire(slot("n1")).granted
    waiters = [f"n{i}" for i in range(2, 10)]
    for name in waiters:
        assert not first.acquire(slot(name)).granted
    second = make_budget("2", "50%", nodes=FakeInventory([*inventory.nodes, node("new", "b")]))
    before = store.version

    # When the waiters retry, handed to either container, and none gets a slot (the total is full)
    for turn, name in enumerate(waiters):
        clock.advance(1)
        assert not (first if turn % 2 else second).acquire(slot(name)).granted

    # Then the document is not rewritten with each container's view of the zones
    assert store.version - before == 0


def test_a_percent_owner_whose_scope_shrank_does_not_keep_another_owners_waiter_from_a_free_slot(
    store: MemoryBudgetStore, clock: FakeClock, make_budget: BudgetFactory
) -> None:
    # Given blue with 10% of its 20 nodes (2), green with an integer 2; green holds g0 and g1
    blue_nodes = FakeInventory([node(f"b{i}", "a") for i in range(20)])
    blue = make_budget("10%", None, owner="blue", nodes=blue_nodes)
    green = make_budget("2", None, owner="green", nodes=FakeInventory([]))
    assert green.acquire(slot("g0", owner="green")).granted
    assert green.acquire(slot("g1", owner="green")).granted
    # blue's b1 waits (first in line), then green's g2
    assert not blue.acquire(slot("b1", owner="blue")).granted
    clock.advance(1)
    assert not green.acquire(slot("g2", owner="green")).granted

    # When blue's scope shrinks to 10 nodes (a refresh terminated half of them: 10% is 1 now), and green
    # releases g0
    blue_nodes.nodes = blue_nodes.nodes[:10]
    clock.advance(1)
    green.release("g0", "rec-g0")

    # Then blue's b1 may not take it (1 holder already, blue's limit 1), but green's g2 may (green: 1 of 2).
    # Both retry every 30 s for a minute and a half
    granted = []
    first_retry = clock.now() + timedelta(seconds=30)
    for _ in range(3):
        clock.advance(30)
        assert not blue.acquire(slot("b1", owner="blue")).granted  # blue's limit is 1, g1 holds it
        if green.acquire(slot("g2", owner="green")).granted:
            granted.append(clock.now())
            break
    # Then green's g2 takes it at its first retry: blue's tighter limit is written by its waiter's retry, so
    # that no owner keeps the slot for b1
    assert granted == [first_retry]


def test_a_release_frees_the_slot_of_its_own_lifecycle_only(
    make_budget: BudgetFactory, store: MemoryBudgetStore
) -> None:
    # Given node n1 held by lifecycle rec-old, then taken over by rec-new (the name reused by a new instance)
    budget = make_budget("1", None)
    budget.acquire(slot("n1"))
    budget.acquire(replace(slot("n1"), record_id="rec-new", instance_id="i-new"))

    # When the old lifecycle's cleanup releases the node late
    budget.release("n1", "rec-n1")

    # Then the new lifecycle still holds it
    doc = store.read()
    assert doc is not None
    assert [(h.node, h.record_id) for h in doc.holders] == [("n1", "rec-new")]


def test_no_waiter_is_passed_over_more_than_a_bounded_number_of_times(
    make_budget: BudgetFactory, store: MemoryBudgetStore, clock: FakeClock
) -> None:
    # Given one slot, held; an old waiter of zone b, then four younger ones of zone a (more work left there)
    budget = make_budget("1", None)
    budget.acquire(slot("h", zone="c"))
    for name, zone in (("b1", "b"), ("a1", "a"), ("a2", "a"), ("a3", "a"), ("a4", "a")):
        clock.advance(1)
        assert not budget.acquire(slot(name, zone=zone)).granted
    # When the slot passes from node to node as each drain ends
    order = []
    holder = "h"
    for _ in range(5):
        (next_up,) = budget.release(holder, f"rec-{holder}")
        holder = next_up.removeprefix("rec-")
        assert budget.acquire(slot(holder, zone="b" if holder == "b1" else "a")).granted
        order.append(holder)
    # Then zone a goes first, but b1 gets its turn once passed over MAX_PASSED times
    assert order == ["a1", "a2", "a3", "b1", "a4"]


def test_a_node_whose_action_cannot_wait_any_longer_takes_a_slot_without_room(
    make_budget: BudgetFactory, store: MemoryBudgetStore
) -> None:
    # Given a full budget
    budget = make_budget("1", None)
    budget.acquire(slot("n1"))
    # When a node whose global timeout is too near asks with force
    decision = budget.acquire(replace(slot("late"), force=True))
    # Then it holds a (forced) slot that the others count, and the next waiter still waits
    assert (decision.granted, decision.reason) == (True, SlotReason.FORCED)
    doc = store.read()
    assert doc is not None
    assert [(h.node, h.forced) for h in doc.holders] == [("n1", False), ("late", True)]
    assert not budget.acquire(slot("n3")).granted


def test_a_node_already_waiting_takes_a_forced_slot_at_once_and_its_other_lifecycle_then_waits_for_it(
    make_budget: BudgetFactory, store: MemoryBudgetStore
) -> None:
    # Given a full budget and a node waiting in line for its terminate lifecycle
    budget = make_budget("1", None)
    budget.acquire(slot("n1"))
    assert not budget.acquire(slot("spot")).granted
    # When a Spot interruption of the same node asks with force, under its own lifecycle record
    decision = budget.acquire(replace(slot("spot"), record_id="rec-spot-interruption", force=True))
    # Then it holds a forced slot at once, out of the line (one node, one slot: its waiting place is gone);
    # and the terminate lifecycle, asking again, is told the slot is its instance's other lifecycle's (it
    # waits for that drain, and cannot release the slot from under it)
    assert (decision.granted, decision.reason) == (True, SlotReason.FORCED)
    doc = store.read()
    assert doc is not None
    assert [(h.node, h.forced) for h in doc.holders] == [("n1", False), ("spot", True)]
    assert doc.waiters == ()
    again = budget.acquire(slot("spot"))
    assert (again.granted, again.reason) == (False, SlotReason.HELD_BY_OTHER_LIFECYCLE)


def test_a_budget_that_was_never_installed_is_a_clear_error_not_a_new_document(
    make_budget: BudgetFactory, store: MemoryBudgetStore
) -> None:
    # Given a cluster where the budget ConfigMap was not applied (nodecycle may not create ConfigMaps)
    store.text = None
    # When a node asks for a slot, Then the error says what is missing, and nothing was made
    with pytest.raises(BudgetNotInstalled, match="nodecycle-budget"):
        make_budget().acquire(slot("n1"))
    assert store.text is None


def test_an_urgent_waiter_that_does_not_fit_yet_is_not_overtaken_until_it_is_forced_past_the_budget(
    make_budget: BudgetFactory, clock: FakeClock
) -> None:
    # Given two stacks sharing the budget, green allowed 1 node at a time and blue (in a refresh) 3; blue holds
    # b1, and green's g1 waits first in line with its action's global timeout near (urgent): it needs the
    # cluster free of disruption under green's limit
    green, blue = make_budget("1", None, owner="green"), make_budget("3", None, owner="blue")
    assert blue.acquire(slot("b1")).granted
    urgent = replace(slot("g1", owner="green"), urgent_at=clock.now())
    assert not green.acquire(urgent).granted

    # When blue's refresh goes on: a newcomer asks, then b1 is given back
    clock.advance(1)
    newcomer = blue.acquire(slot("b2"))
    clock.advance(1)
    blue.release("b1", "rec-b1")

    # Then the newcomer waits behind g1 (granted, it would keep green's view full, and g1 waiting through every
    # drain of the refresh until its global timeout forced it past the budget): g1 goes first, as soon as
    # the room it needs is there; blue's newcomer after it
    assert (newcomer.granted, newcomer.reason) == (False, SlotReason.NO_ROOM), newcomer
    clock.advance(1)
    assert green.acquire(replace(urgent, urgent_at=urgent.urgent_at)).granted
    assert blue.acquire(slot("b2")).granted  # blue's 3 leave room for it beside g1


def test_a_drain_in_progress_that_lost_its_slot_is_not_overtaken_by_untouched_nodes_while_it_does_not_fit(
    make_budget: BudgetFactory, clock: FakeClock
) -> None:
    # Given a per-zone limit of 1 (2 in all): nodes hold zones a and b, and a cordoned, partly drained node of
    # unknown zone (it counts against every zone) lost its slot and waits in line, in progress
    budget = make_budget("2", "1")
    assert budget.acquire(slot("a1", "a")).granted
    assert budget.acquire(slot("b1", "b")).granted
    lost = replace(slot("x", None), in_progress=True)
    assert not budget.renew(lost).granted

    # When a1 is given back while an untouched node of zone a waits, then b1
    clock.advance(1)
    assert not budget.acquire(slot("a2", "a")).granted
    woken = budget.release("a1", "rec-a1")
    clock.advance(1)
    woken += budget.release("b1", "rec-b1")

    # Then the untouched node did not take zone a's slot, which the drain in progress needs: the drain goes on
    # first, passed its slot as soon as every zone has room for it (invariant 9)
    assert woken == ["rec-x"], woken


def test_an_urgent_node_of_unknown_zone_goes_once_the_holders_it_waits_for_are_gone_whatever_keeps_coming(
    make_budget: BudgetFactory, clock: FakeClock
) -> None:
    # Given a per-zone limit of 1 (3 in all), a node held in each zone, and an urgent node without a zone label
    # waiting: it needs every zone free
    budget = make_budget("3", "1")
    holders = [f"{zone}0" for zone in "abc"]
    for name in holders:
        assert budget.acquire(slot(name, name[0])).granted
    urgent = replace(slot("u", None), urgent_at=clock.now())
    assert not budget.acquire(urgent).granted

    # When the holders give their slots back one at a time, oldest first, while a newcomer of the zone freed
    # asks at once each time (a refresh that keeps coming), and the urgent node asks again
    granted_at = None
    for turn in range(1, 10):
        clock.advance(5)
        oldest = holders.pop(0)
        budget.release(oldest, f"rec-{oldest}")
        newcomer = f"{oldest[0]}{turn}"
        if budget.acquire(slot(newcomer, newcomer[0])).granted:
            holders.append(newcomer)
        if budget.acquire(urgent).granted:
            granted_at = turn
            break

    # Then it goes as soon as the three holders it waited for are gone: no newcomer took a zone it needed
    assert granted_at == 3


def test_a_waiter_another_stacks_release_made_eligible_is_passed_its_slot_at_its_own_stacks_next_write(
    make_budget: BudgetFactory, clock: FakeClock
) -> None:
    # Given a budget of 1 shared by green, holding g0, and blue, whose b1 waits first in line
    green, blue = make_budget("1", None, owner="green"), make_budget("1", None)
    assert green.acquire(slot("g0", owner="green")).granted
    assert not blue.acquire(slot("b1")).granted

    # When green gives g0 back: green cannot reach blue's queue, so it wakes nobody, and the slot stays free for b1
    clock.advance(5)
    assert green.release("g0", "rec-g0") == []

    # and blue writes next (its newcomer b2 joins the line), before b1's own retry (up to 4 x 30 s later)
    clock.advance(1)
    decision = blue.acquire(slot("b2"))

    # Then that write passes the slot on to b1 and wakes it, as blue's own release would have: nothing else did,
    # and the slot stood idle until b1's retry
    assert not decision.granted
    assert decision.wake == ("rec-b1",)
    assert blue.acquire(slot("b1")).reason is SlotReason.HELD
