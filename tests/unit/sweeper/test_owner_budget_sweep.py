"""The budget part of the sweep with two stacks on one budget whose owner ids are a prefix of each other
("team", "team-a"): each sweep judges and frees only its own owner's entries, and passes freed slots only to its
own waiters; the other owner's expired entries go, as every writer prunes them (docs/design.md: "Stale holders
do not count and are removed by the next writer or the sweeper"), but nothing it holds live."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from nodecycle.domain.budget import BudgetLimits, DisruptionBudget, SlotReason, SlotRequest
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.model import Step
from nodecycle.domain.policy import Quantity
from nodecycle.domain.sweep.budget_entries import StaleBudgetEntries
from nodecycle.domain.sweep.sweep_time import SweepTime
from tests.support.fakes import T0, FakeClock, FakeMetrics, InMemoryRecords, RecordingQueues
from tests.unit.budget.fakes import FakeInventory, MemoryBudgetStore, RecordingMetrics, node
from tests.unit.foundation.test_engine import PLAN, make_record
from tests.unit.sweeper.test_sweeper import AliveInstances

TTL = 600
NODES = [node(f"n{i}") for i in range(1, 7)]


@dataclass
class Stack:
    """One stack's side of the shared budget: its owner, its records (its own table), its queues."""

    owner: str
    store: MemoryBudgetStore
    clock: FakeClock
    records: InMemoryRecords = field(default_factory=InMemoryRecords)
    queues: RecordingQueues = field(default_factory=RecordingQueues)
    open_ids: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.budget = DisruptionBudget(
            store=self.store,
            nodes=FakeInventory(NODES),
            clock=self.clock,
            metrics=RecordingMetrics(),
            limits=BudgetLimits(Quantity.parse("2"), None),
            holder_ttl=timedelta(seconds=TTL),
            count_unavailable=False,
            owner=self.owner,
        )

    def rid(self, name: str) -> str:
        return f"i-{name}/terminate/{self.owner}"

    def lifecycle(self, name: str, *, over: bool = False, recorded: bool = True) -> SlotReason:
        """A lifecycle of this stack on node ``name`` that asked for a slot; ``over``: ended without giving it back
        (its cleanup died); ``recorded``: its record is in this stack's table."""
        if recorded:
            self.records.create(
                make_record(
                    PLAN,
                    Step.DONE if over else Step.ACQUIRE_SLOT,
                    id=self.rid(name),
                    owner=self.owner,
                    instance_id=f"i-{name}",
                    node=name,
                    token=self.owner,
                )
            )
        if not over:
            self.open_ids.add(self.rid(name))
        request = SlotRequest(
            node=name,
            instance_id=f"i-{name}",
            zone="a",
            owner=self.owner,
            record_id=self.rid(name),
            token=self.owner,
        )
        reason = self.budget.acquire(request).reason
        self.clock.advance(1)
        return reason

    def sweep(self, alive: set[str], nodes: set[str]) -> dict[str, int]:
        part = StaleBudgetEntries(
            budget=self.budget,
            records=self.records,
            node_names=lambda: set(nodes),
            alive_instances=AliveInstances(alive),
            waker=Dispatcher(
                records=self.records, queues=self.queues, clock=self.clock, metrics=FakeMetrics()
            ),
        )
        opened = [r for i in sorted(self.open_ids) if (r := self.records.items.get(i))]
        time = SweepTime(lambda: 300.0, timedelta(seconds=45))
        return part(opened, self.clock.now(), time)

    def woken(self) -> list[str]:
        return [sent.message.record_id for sent in self.queues.take() if sent.message.wake]


def entries(store: MemoryBudgetStore) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    doc = store.read()
    assert doc is not None
    return [(h.node, h.owner) for h in doc.holders], [(w.node, w.owner) for w in doc.waiters]


def two_stacks() -> tuple[Stack, Stack, FakeClock, MemoryBudgetStore]:
    clock, store = FakeClock(T0), MemoryBudgetStore()
    return Stack("team", store, clock), Stack("team-a", store, clock), clock, store


def test_a_sweep_frees_nothing_the_other_owner_holds_even_when_its_node_and_instance_are_gone() -> None:
    # Given "team-a" holding n1 and n2 (a budget of 2), and "team" in line for n3; team-a's n1 is gone (node and
    # instance) with its lifecycle's record in team-a's table only, and "team" holds nothing of n1
    team, team_a, clock, store = two_stacks()
    assert team_a.lifecycle("n1") is SlotReason.GRANTED
    assert team_a.lifecycle("n2") is SlotReason.GRANTED
    assert team.lifecycle("n3") is SlotReason.NO_ROOM
    team.queues.take()

    # When team's sweep runs, its own EC2 and node list saying n1 and i-n1 are gone (and team's table not
    # knowing team-a's lifecycles: read, they would look over)
    counts = team.sweep(alive={"i-n2", "i-n3"}, nodes={"n2", "n3"})

    # Then team-a's holders are as they were, team still waits, and nobody was woken
    assert entries(store) == ([("n1", "team-a"), ("n2", "team-a")], [("n3", "team")])
    assert counts == {"SweptHolders": 0, "SweptWaiters": 0}
    assert team.woken() == []

    # And team-a's own sweep frees n1, passes the slot on to team's waiter at team's own retry (not woken by
    # team-a: each stack wakes only its own waiters)
    counts = team_a.sweep(alive={"i-n2", "i-n3"}, nodes={"n2", "n3"})
    assert counts == {"SweptHolders": 1, "SweptWaiters": 0}
    assert entries(store) == ([("n2", "team-a")], [("n3", "team")])
    assert team_a.woken() == []
    clock.advance(5)
    assert team.lifecycle("n3") is SlotReason.GRANTED


def test_a_sweep_removes_the_other_owners_expired_holder_and_passes_its_slot_to_its_own_waiter_only() -> None:
    # Given "team-a" holding n1 and n2, its lifecycle of n1 dead (it never renews), "team-a" in line for n4 and
    # "team" in line for n3 after it
    team, team_a, clock, store = two_stacks()
    team_a.lifecycle("n1")
    team_a.lifecycle("n2")
    assert team_a.lifecycle("n4") is SlotReason.NO_ROOM
    assert team.lifecycle("n3") is SlotReason.NO_ROOM
    team.queues.take()
    team_a.queues.take()

    # When n1's holder expires, the others renewed shortly before (no write of team-a's since, which would
    # prune it and pass its slot on itself), and team's sweep is the first write after it
    clock.advance(TTL - 20)
    team_a.lifecycle("n2")
    team_a.lifecycle("n4")
    team.lifecycle("n3")
    clock.advance(30)
    team.queues.take()
    team_a.queues.take()
    team.sweep(alive={"i-n1", "i-n2", "i-n3", "i-n4"}, nodes={"n1", "n2", "n3", "n4"})

    # Then n1's expired holder is gone (every writer prunes the expired entries, of every owner), but team's
    # sweep passes its slot to no waiter of team-a's: team-a's n4, first in line, is not granted by team's write
    # nor woken by it, and team's n3 waits behind it (first come, first served across owners)
    holders, waiters = entries(store)
    assert ("n1", "team-a") not in holders
    assert holders == [("n2", "team-a")]
    assert waiters == [("n4", "team-a"), ("n3", "team")]
    assert team.woken() == []
    assert team_a.woken() == []
    # and team-a's waiter takes it at its own next ask
    assert team_a.lifecycle("n4") is SlotReason.GRANTED
