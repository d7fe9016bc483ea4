"""The budget part of the sweep under failure and short time, on the real DisruptionBudget over the ConfigMap's
stand-in (MemoryBudgetStore) and the real dispatcher: a sweep cut short, EC2 refusing DescribeInstances, the
wake-ups of the slots it passed on."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import timedelta

import boto3
import pytest
from botocore.stub import Stubber

from nodecycle.adapters.aws.instances import Ec2Instances
from nodecycle.domain.budget import BudgetLimits, DisruptionBudget, SlotReason, SlotRequest
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.policy import Quantity
from nodecycle.domain.sweep.budget_entries import StaleBudgetEntries
from nodecycle.domain.sweep.sweep_time import OutOfTime, SweepTime
from nodecycle.domain.sweep.sweeper import SweepFailed
from tests.support.fakes import T0, FakeClock, FakeMetrics, InMemoryRecords, RecordingQueues
from tests.unit.budget.fakes import FakeInventory, MemoryBudgetStore, RecordingMetrics, node
from tests.unit.foundation.test_engine import PLAN, make_record
from tests.unit.sweeper.test_sweeper import AliveInstances

OWNER = "stack-a"
READ = 10.0  # seconds one throttled record read takes (retried by the client)


def rid(name: str) -> str:
    return f"i-{name}/terminate/{name}"


@dataclass
class World:
    """One owner's budget of ``limit`` slots over MemoryBudgetStore, its lifecycle records, the dispatcher that
    wakes waiters through the recorded queues, and a clock that throttled record reads move on."""

    limit: str = "1"
    clock: FakeClock = field(default_factory=lambda: FakeClock(T0))
    records: InMemoryRecords = field(default_factory=InMemoryRecords)
    queues: RecordingQueues = field(default_factory=RecordingQueues)
    store: MemoryBudgetStore = field(default_factory=MemoryBudgetStore)
    nodes: set[str] = field(default_factory=set)
    open_ids: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.budget = DisruptionBudget(
            store=self.store,
            nodes=FakeInventory([node(f"n{i}") for i in range(1, 6)]),
            clock=self.clock,
            metrics=RecordingMetrics(),
            limits=BudgetLimits(Quantity.parse(self.limit), None),
            holder_ttl=timedelta(seconds=600),
            count_unavailable=False,
            owner=OWNER,
        )
        get = self.records.get

        def throttled(record_id: str) -> LifecycleRecord | None:
            self.clock.advance(READ)
            return get(record_id)

        self.records.get = throttled  # type: ignore[method-assign]

    def lifecycle(self, name: str, *, over: bool = False) -> str:
        """A lifecycle of node ``name`` that asked for a slot (granted or waiting); ``over``: it ended since
        without giving its entry back (its cleanup died), else it is among the sweep's open ones."""
        self.nodes.add(name)
        step = Step.DONE if over else Step.ACQUIRE_SLOT
        self.records.create(
            make_record(
                PLAN,
                step,
                id=rid(name),
                instance_id=f"i-{name}",
                node=name,
                token=name,
                slot_waiting_since=T0,
            )
        )
        if not over:
            self.open_ids.add(rid(name))
        request = SlotRequest(
            node=name, instance_id=f"i-{name}", zone="a", owner=OWNER, record_id=rid(name), token=name
        )
        self.budget.acquire(request)
        self.clock.advance(1)  # (each joins the line after the one before)
        return rid(name)

    def part(
        self,
        alive: Callable[[Collection[str]], set[str]] | None = None,
        node_names: Callable[[], set[str]] | None = None,
        nodes_now: Callable[[Collection[str]], set[str]] | None = None,
    ) -> StaleBudgetEntries:
        return StaleBudgetEntries(
            budget=self.budget,
            records=self.records,
            node_names=node_names or (lambda: set(self.nodes)),
            nodes_now=nodes_now,
            alive_instances=alive or AliveInstances({f"i-{n}" for n in self.nodes}),
            waker=Dispatcher(
                records=self.records, queues=self.queues, clock=self.clock, metrics=FakeMetrics()
            ),
        )

    def open_records(self) -> list[LifecycleRecord]:
        return [
            record for record_id in sorted(self.open_ids) if (record := self.records.items.get(record_id))
        ]

    def time(self, left: float, reserve: float, held_back: float = 0) -> SweepTime:
        """The part's time as the sweeper gives it: ``left`` seconds from now on the clock, less the reserve and
        the shares ``held_back`` for the parts after it."""
        began = self.clock.now()
        return SweepTime(
            lambda: left - (self.clock.now() - began).total_seconds(),
            timedelta(seconds=reserve),
            held_back=timedelta(seconds=held_back),
        )

    def holders(self) -> list[str]:
        doc = self.store.read()
        assert doc is not None
        return [h.node for h in doc.holders]

    def waiters(self) -> list[str]:
        doc = self.store.read()
        assert doc is not None
        return [w.node for w in doc.waiters]

    def woken(self) -> list[str]:
        return [sent.message.record_id for sent in self.queues.take() if sent.message.wake]


def test_a_sweep_cut_short_passes_no_slot_to_a_waiter_it_had_no_time_to_judge() -> None:
    # Given a budget of 1 held by n1, whose lifecycle is over (its cleanup died), and two waiters in line: n2,
    # whose lifecycle is over too, and n3, open; each record read is throttled (10 s), and the part's time lets
    # it read one record only
    world = World()
    world.lifecycle("n1", over=True)
    world.lifecycle("n2", over=True)
    n3 = world.lifecycle("n3")
    world.queues.take()

    # When the sweep's budget part runs: it judges n1 stale (its record read), and has no time left to read n2's
    with pytest.raises(OutOfTime, match="1 budget entries not judged"):
        world.part()(world.open_records(), world.clock.now(), world.time(left=60, reserve=15, held_back=40))

    # Then n1's slot goes to n3, whose lifecycle is open, and n2 keeps its place unjudged, for the next sweep
    # (before: the slot went to n2, first in line, whose lifecycle is gone: nobody to wake, the slot idle until
    # n2's entry expired or a sweep with the time to judge it came)
    assert world.holders() == ["n3"]
    assert world.waiters() == ["n2"]
    assert world.woken() == [n3]


def test_the_wake_ups_of_the_slots_a_sweep_passed_on_are_sent_with_the_time_of_the_parts_after_it() -> None:
    # Given a budget of 1 held by n1, whose lifecycle is over, n2 waiting (open); the read of n1's record takes
    # the part's time down into the shares held back for the parts after it, not into the reserve
    world = World()
    world.lifecycle("n1", over=True)
    n2 = world.lifecycle("n2")
    world.queues.take()

    # When the sweep's budget part runs
    counts = world.part()(
        world.open_records(), world.clock.now(), world.time(left=60, reserve=15, held_back=40)
    )

    # Then n1's slot is passed on to n2, and n2 is woken: the wake-up completes the write that passed it the slot
    # (before: skipped for want of time, with the slot written as n2's: n2 learnt of it only at its own retry,
    # up to minutes, the slot idle meanwhile)
    assert counts["SweptHolders"] == 1
    assert world.holders() == ["n2"]
    assert world.woken() == [n2]


def test_a_waiter_left_unjudged_that_asks_again_during_the_sweep_is_passed_the_slot() -> None:
    # Given a budget of 1 held by n1, whose lifecycle is over, and n2 waiting, whose lifecycle began after the
    # sweep listed the open ones (not among them); the part has time to read n1's record only
    world = World()
    world.lifecycle("n1", over=True)
    n2 = world.lifecycle("n2")
    world.open_ids.discard(n2)
    snapshot = world.open_records()
    world.queues.take()
    world.clock.advance(200)  # (n2's place is renewed at its next ask: a third of its TTL passed)

    # When n2 asks again between the sweep's read of the budget and its write (its place renewed: the write
    # conflicts, and the sweep reads the budget again)
    def asks_again() -> None:
        world.budget.acquire(
            SlotRequest(node="n2", instance_id="i-n2", zone="a", owner=OWNER, record_id=n2, token="n2")
        )

    world.store.interleave(asks_again)
    with pytest.raises(OutOfTime, match="1 budget entries not judged"):
        world.part()(snapshot, world.clock.now(), world.time(left=60, reserve=15, held_back=40))

    # Then n1's slot goes to n2 all the same: a waiter that renewed its place since it was left unjudged asked
    # meanwhile, and its lifecycle is alive
    assert world.holders() == ["n2"]
    assert world.woken() == [n2]


def refusing_ec2(code: str) -> Ec2Instances:
    """Ec2Instances over a client whose DescribeInstances answers ``code`` (its retries spent)."""
    client = boto3.client(
        "ec2", region_name="eu-west-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    stubber = Stubber(client)
    stubber.add_client_error("describe_instances", service_error_code=code, http_status_code=403)
    stubber.activate()
    return Ec2Instances(client)


@pytest.mark.parametrize("code", ["UnauthorizedOperation", "RequestLimitExceeded"])
def test_a_describe_instances_refused_still_frees_the_holders_the_nodes_and_records_show_gone(
    code: str,
) -> None:
    # Given a budget of 3 held by n1, whose node is gone and whose lifecycle is over though the sweep's snapshot
    # (an index that lags) has it open, n2, whose lifecycle is over (its node still listed), and n3, live; and n4
    # waiting; EC2 refuses DescribeInstances (the role denied, or throttled past the client's retries)
    world = World(limit="3")
    n1 = world.lifecycle("n1", over=True)
    world.open_ids.add(n1)
    world.lifecycle("n2", over=True)
    world.lifecycle("n3")
    n4 = world.lifecycle("n4")
    world.nodes.discard("n1")
    world.queues.take()

    # When the sweep's budget part runs, Then it fails, saying EC2 refused
    with pytest.raises(SweepFailed, match="instances"):
        world.part(alive=refusing_ec2(code).alive)(
            world.open_records(), world.clock.now(), world.time(300, 45)
        )

    # and yet n1's and n2's slots were freed, by what the records tell (n1's read again, its node missing), and
    # passed on to n4
    # (before: the whole part failed, and the slots of instances known gone stayed until their TTL)
    assert world.holders() == ["n3", "n4"]
    assert world.woken() == [n4]


def test_a_node_list_refused_still_frees_the_holders_ec2_and_the_records_show_gone() -> None:
    # Given n1, whose instance is terminated, n2, whose lifecycle is over, n3, live, n4 waiting; the API server
    # refuses the list of nodes
    world = World(limit="3")
    world.lifecycle("n1")
    world.lifecycle("n2", over=True)
    world.lifecycle("n3")
    n4 = world.lifecycle("n4")
    world.queues.take()

    def refused() -> set[str]:
        raise TimeoutError("listing nodes: the API server did not answer")

    part = world.part(alive=AliveInstances({"i-n2", "i-n3", "i-n4"}), node_names=refused)

    # When the sweep's budget part runs, Then it fails, saying the nodes could not be listed
    with pytest.raises(SweepFailed, match="nodes"):
        part(world.open_records(), world.clock.now(), world.time(300, 45))

    # and n1's and n2's slots were freed all the same, and passed on to n4
    assert world.holders() == ["n3", "n4"]
    assert world.woken() == [n4]


def test_a_wake_up_sqs_refuses_after_the_sweep_passed_the_slot_on_is_repaired_by_the_waiters_own_ask() -> (
    None
):
    # Given a budget of 1 held by n1, whose lifecycle is over, and n2 waiting; SQS refuses n2's wake-up
    world = World()
    world.lifecycle("n1", over=True)
    n2 = world.lifecycle("n2")
    world.queues.take()

    def refused(worker: object, message: object, delay_seconds: int = 0) -> None:
        raise TransientError("sending to the wake lane: throttled")

    world.queues.send = refused  # type: ignore[method-assign]

    # When the sweep's budget part runs, Then it fails for the wake-up, the slot written as n2's
    with pytest.raises(SweepFailed, match="could not wake 1 waiters"):
        world.part()(world.open_records(), world.clock.now(), world.time(300, 45))
    assert world.holders() == ["n2"]

    # and n2's own ask, at its retry (BudgetRetrySeconds, at most a third of the TTL: before its entry could
    # expire), finds the slot held for it, with nothing to write. Not a defect: the design leaves a lost wake-up
    # to the waiter's retry (DisruptionBudget._pass_on); the next sweep, minutes later, would come after it.
    world.clock.advance(120)
    version = world.store.version
    decision = world.budget.acquire(
        SlotRequest(node="n2", instance_id="i-n2", zone="a", owner=OWNER, record_id=n2, token="n2")
    )
    assert decision.granted
    assert decision.reason is SlotReason.HELD
    assert world.store.version == version


def test_a_node_missing_from_the_list_is_read_again_and_unread_tells_nothing() -> None:
    # Given a budget of 1 held by n1 and n2 waiting, both open, and a list of the nodes that lags behind them (a
    # watch cache's: n1 registered moments before its drain took the slot)
    world = World()
    n1 = world.lifecycle("n1")
    world.lifecycle("n2")
    world.queues.take()
    asked: list[set[str]] = []

    def read_again(names: Collection[str]) -> set[str]:
        asked.append(set(names))
        raise TransientError("HTTP 503 the server is currently unable to handle the request")

    # When the sweep's budget part runs and reading n1 again fails
    with pytest.raises(SweepFailed, match="read again the nodes missing from the list"):
        world.part(node_names=lambda: {"n2"}, nodes_now=read_again)(
            world.open_records(), world.clock.now(), world.time(left=300, reserve=15)
        )

    # Then n1 alone was read again, and keeps its slot: unread, its node is not taken for gone
    assert asked == [{"n1"}]
    assert (world.holders(), world.waiters(), world.woken()) == (["n1"], ["n2"], [])
    assert n1 in world.open_ids
