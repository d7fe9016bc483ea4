"""How far the room kept for a stricter stack's waiter passed over by a looser stack's refresh reaches (see
``rules._kept_for``, ``rules._crowded_out``): green allows 2 nodes out at once, blue 3, and blue's refresh takes every
slot it frees. Once green's waiter has been passed over ``MAX_PASSED`` times, blue's newcomers wait while blue's
holders drain down under green's limit. That room must never idle for longer than a place in line lasts: green's
stack deleted (its waiter never asks again, nobody of its own left to remove it) holds blue back until the waiter's
place expires, a TTL after its last renewal, and no longer; green upgraded to a looser limit takes its slot at its
next ask; two stricter stacks passed over alike each get their slot in turn, neither keeping the other out. On the
sandbox API server, through the product's adapters."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from kubernetes import client

from nodecycle.domain.budget import BudgetDocument, DisruptionBudget, SlotReason, rules
from nodecycle.domain.budget.document import Waiter
from nodecycle.domain.budget.rules import MAX_PASSED, Occupancy
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import add_nodes, core_api, node_name
from tests.integration.budget.test_configmap_recreated import TTL, budget_of, polled, request
from tests.unit.budget.fakes import FakeClock

NODES = 30
NO_ZONE_LIMIT = "30"  # (each stack's limit is its total alone)
INDEX = {node_name(i): i for i in range(NODES + 1)}


def holders(budget: DisruptionBudget) -> dict[str, str]:
    """The nodes held, by owner."""
    return {h.node: h.owner for h in budget.snapshot().holders}


def passed_over(budget: DisruptionBudget, index: int) -> int:
    waiter = next(w for w in budget.snapshot().waiters if w.node == node_name(index))
    return waiter.passed


def blue_refresh_passing_green_over(api: client.CoreV1Api, clock: FakeClock) -> tuple[DisruptionBudget, int]:
    """Blue (3) holding nodes 1 to 3 of its refresh, green's node 0 (green allows 2) waiting, passed over
    ``MAX_PASSED`` times by blue's grants as each of blue's drains ended; returns blue and its next node."""
    blue = budget_of(api, clock, "blue", total="3", per_zone=NO_ZONE_LIMIT)
    green = budget_of(api, clock, "green", total="2", per_zone=NO_ZONE_LIMIT)
    for i in (1, 2):
        assert blue.acquire(request(i, "blue")).granted
    assert green.acquire(request(0, "green")).reason is SlotReason.NO_ROOM
    nxt = 3
    assert blue.acquire(request(nxt, "blue")).granted
    while passed_over(blue, 0) < MAX_PASSED:
        clock.advance(5)
        oldest = min(INDEX[n] for n, o in holders(blue).items() if o == "blue")
        blue.release(node_name(oldest), request(oldest).record_id, request(oldest).token)
        nxt += 1
        assert blue.acquire(request(nxt, "blue")).granted
    return blue, nxt + 1


def test_the_room_kept_for_a_deleted_stacks_waiter_holds_the_looser_stack_back_for_its_place_in_line_only(
    server: KubeServer,
) -> None:
    # Given green's node 0 passed over MAX_PASSED times by blue's refresh (blue holding 3, green's view full)
    add_nodes(server, NODES)
    api = core_api(server)
    clock = FakeClock()
    blue, nxt = blue_refresh_passing_green_over(api, clock)
    # When green's stack is deleted (its drain function gone: node 0 never asks again, no sweeper of green's removes
    # its place), and blue's drains end one by one, its newcomer asking, its holders polling
    held = sorted(INDEX[n] for n in holders(blue))
    assert blue.acquire(request(nxt, "blue")).reason is SlotReason.NO_ROOM  # (room kept for green's node)
    for i in held[:2]:
        blue.release(node_name(i), request(i).record_id, request(i).token)
    last = held[2]
    # Then blue's newcomer waits (the slot beside blue's last holder is green's node's, under green's 2) while green's
    # place lasts; as it would for green's own ask, which takes it at once
    elapsed = 0
    while elapsed + 30 < TTL.total_seconds():
        clock.advance(30)
        elapsed += 30
        assert blue.renew(polled(last)).granted
        assert blue.acquire(request(nxt, "blue")).reason is SlotReason.NO_ROOM, elapsed
        assert set(holders(blue)) == {node_name(last)}
    # And no longer: once its place expired (a TTL after green's last ask), blue's newcomers take their slots
    clock.advance(TTL.total_seconds() - elapsed + 1)
    assert blue.renew(polled(last)).granted
    assert blue.acquire(request(nxt, "blue")).granted
    assert blue.acquire(request(nxt + 1, "blue")).granted
    assert node_name(0) not in {w.node for w in blue.snapshot().waiters}
    api.api_client.close()


def test_a_stricter_stack_upgraded_to_a_looser_limit_takes_its_slot_at_its_next_ask(
    server: KubeServer,
) -> None:
    # Given green's node 0 passed over MAX_PASSED times by blue's refresh, its room kept (blue's newcomer waits)
    add_nodes(server, NODES)
    api = core_api(server)
    clock = FakeClock()
    blue, nxt = blue_refresh_passing_green_over(api, clock)
    assert blue.acquire(request(nxt, "blue")).reason is SlotReason.NO_ROOM
    # When green's stack is updated to allow 4, and its node asks again
    green = budget_of(api, clock, "green", total="4", per_zone=NO_ZONE_LIMIT)
    clock.advance(5)
    # Then it takes its slot beside blue's 3 (green's new limit), without waiting for blue to drain down to 1
    assert green.acquire(request(0, "green")).granted
    assert len(holders(green)) == 4
    # and blue's newcomer then goes as soon as blue's own 3 has room (two of its drains ended), no room kept
    held = sorted(INDEX[n] for n, o in holders(blue).items() if o == "blue")
    for i in held[:2]:
        blue.release(node_name(i), request(i).record_id, request(i).token)
    assert blue.acquire(request(nxt, "blue")).granted
    api.api_client.close()


def test_two_stricter_stacks_passed_over_by_a_looser_refresh_each_take_their_slot_in_turn(
    server: KubeServer,
) -> None:
    # Given blue allowing 4 and refreshing, green and red allowing 2 each, green's node 0 and red's node 30 waiting
    add_nodes(server, NODES + 1)
    api = core_api(server)
    clock = FakeClock()
    blue = budget_of(api, clock, "blue", total="4", per_zone=NO_ZONE_LIMIT)
    green = budget_of(api, clock, "green", total="2", per_zone=NO_ZONE_LIMIT)
    red = budget_of(api, clock, "red", total="2", per_zone=NO_ZONE_LIMIT)
    for i in (1, 2, 3):
        assert blue.acquire(request(i, "blue")).granted
    assert green.acquire(request(0, "green")).reason is SlotReason.NO_ROOM
    clock.advance(1)
    assert red.acquire(request(NODES, "red")).reason is SlotReason.NO_ROOM

    # When blue's refresh goes on (a drain ends, its next node asks; the stricter stacks' nodes ask at each round,
    # and drain for two rounds once granted)
    got: dict[str, int] = {}
    nxt, rounds = 4, 0
    while len(got) < 2 and nxt < NODES:
        rounds += 1
        clock.advance(5)
        assert blue.acquire(request(nxt, "blue")).reason in (SlotReason.GRANTED, SlotReason.NO_ROOM)
        nxt += 1
        for owner, budget, index in (("green", green, 0), ("red", red, NODES)):
            if owner in got:
                if rounds - got[owner] == 2:
                    budget.release(
                        node_name(index), request(index, owner).record_id, request(index, owner).token
                    )
                continue
            if budget.acquire(request(index, owner)).granted:
                got[owner] = rounds
                # (its own limit held when it granted)
                assert len(holders(budget)) <= 2, holders(budget)
        mine = sorted(INDEX[n] for n, o in holders(blue).items() if o == "blue")
        assert len(mine) <= 4
        if mine:
            blue.release(node_name(mine[0]), request(mine[0]).record_id, request(mine[0]).token)
        # no round leaves the cluster with nothing draining while nodes wait
        assert holders(blue) or not blue.snapshot().waiters, rounds

    # Then both take their slots within a few of blue's grants, one after the other
    assert set(got) == {"green", "red"}, f"after {rounds} rounds: {got}"
    assert rounds <= 2 * (MAX_PASSED + 3), rounds
    api.api_client.close()


def _kept_before_the_rule(
    line: Sequence[tuple[tuple[Any, ...], Waiter, tuple[str, str | None]]],
    occupancy: dict[str, Occupancy],
    doc: BudgetDocument,
) -> list[tuple[tuple[Any, ...], Waiter, tuple[str, str | None]]]:
    """``rules._kept_for`` as the version before the rule wrote it: room kept for a drain in progress or a node near
    its global timeout only."""
    kept = []
    for entry in line:
        standing, waiter, (owner, zone) = entry
        resolved = doc.limits[owner].resolved
        if standing[0] >= 2 or occupancy[owner].admits(waiter.node, zone, resolved):
            continue
        if Occupancy(rules.counted_unavailable(doc, doc.limits[owner])).admits(waiter.node, zone, resolved):
            kept.append(entry)
    return kept


class OlderStack:
    """A stack still running the version before the rule (an upgrade rolled out stack by stack): its writes count no
    pass for another stack's waiter its grants keep out, and its replays keep no room for one passed over."""

    def __init__(self, budget: DisruptionBudget, monkeypatch: pytest.MonkeyPatch) -> None:
        self._budget = budget
        self._monkeypatch = monkeypatch

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._budget, name)

        def older(*args: Any, **kwargs: Any) -> Any:
            with self._monkeypatch.context() as patch:
                patch.setattr(rules, "_kept_for", _kept_before_the_rule)
                patch.setattr(rules, "_crowded_out", lambda *_: iter(()))
                return method(*args, **kwargs)

        return older


def test_a_stricter_stack_still_on_the_older_version_gets_its_slot_from_an_upgraded_looser_stacks_refresh(
    server: KubeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given blue (3) upgraded and refreshing, holding 2; green (2) on the version before the rule, its node 0 waiting
    add_nodes(server, NODES)
    api = core_api(server)
    clock = FakeClock()
    blue = budget_of(api, clock, "blue", total="3", per_zone=NO_ZONE_LIMIT)
    green = OlderStack(budget_of(api, clock, "green", total="2", per_zone=NO_ZONE_LIMIT), monkeypatch)
    for i in (1, 2):
        assert blue.acquire(request(i, "blue")).granted
    assert green.acquire(request(0, "green")).reason is SlotReason.NO_ROOM

    # When blue's refresh goes on, a drain ending and its next node asking at each round, green's node asking too
    rounds, nxt, granted = 0, 3, False
    while not granted and nxt < NODES:
        rounds += 1
        clock.advance(5)
        blue.acquire(request(nxt, "blue"))
        nxt += 1
        granted = green.acquire(request(0, "green")).granted
        if granted:
            assert len(holders(blue)) <= 2, holders(blue)  # (green's own limit held when it granted)
        mine = sorted(INDEX[n] for n, o in holders(blue).items() if o == "blue")
        assert len(mine) <= 3
        blue.release(node_name(mine[0]), request(mine[0]).record_id, request(mine[0]).token)

    # Then green's older version takes the slot that blue's keeps for it once blue's holders drained down: the
    # upgraded looser stack alone counts the passes and keeps the room, and the older stack's replay, which puts a
    # node passed over MAX_PASSED times first, grants it
    assert granted, f"green's node still waits after {rounds} rounds of blue's refresh"
    assert rounds <= MAX_PASSED + 3, rounds
    api.api_client.close()


def test_a_looser_stacks_drain_in_progress_that_lost_its_slot_goes_before_the_room_kept_for_a_stricter_one(
    server: KubeServer,
) -> None:
    # Given green's node 0 passed over MAX_PASSED times by blue's refresh (blue holding 3, green's view full), its room
    # kept: blue's newcomer waits
    add_nodes(server, NODES)
    api = core_api(server)
    clock = FakeClock()
    blue, nxt = blue_refresh_passing_green_over(api, clock)
    green = budget_of(api, clock, "green", total="2", per_zone=NO_ZONE_LIMIT)
    assert blue.acquire(request(nxt, "blue")).reason is SlotReason.NO_ROOM
    stalled, *polling = sorted(INDEX[n] for n in holders(blue))
    # When one of blue's drains stalls past its slot's TTL (a function that stopped), cordoned and partly evicted,
    # while the others poll and the nodes in line ask again
    elapsed = 0.0
    while elapsed <= TTL.total_seconds():
        clock.advance(TTL.total_seconds() / 4)
        elapsed += TTL.total_seconds() / 4
        for i in polling:
            assert blue.renew(polled(i)).granted
        assert not green.acquire(request(0, "green")).granted  # (green's view: blue's 2 polling, full)
        blue.acquire(request(nxt, "blue"))
    assert set(holders(blue)) == {node_name(i) for i in polling}
    # Then the stalled drain, polling again, takes its slot back at once (blue's 3 has room): a drain in progress goes
    # before any node not yet touched, the room kept for green's passed-over node included (invariant 9)
    assert blue.renew(polled(stalled)).granted
    assert node_name(nxt) not in holders(blue)  # (blue's newcomer still waits, for green's node)
    api.api_client.close()
