"""The sweep on the real record store (DynamoDB on moto) while the open lifecycles' index lags the table, as a
global secondary index always may (the sandbox's lag: nodecycle_sandbox/aws/dynamodb_index_lag.py): a record just
written is missing from the listing, one just closed is still listed, a listed one is an older version of the
record. Each part reads a listed record again, consistently, before it acts on it or counts it, and takes nothing
missing from the listing as absent."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta

import pytest

from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle.domain.completion import CompleteAction
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.errors import TransientError
from nodecycle.domain.intake import IntakeOutcome
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.sweep.annotations import LeftoverAnnotations
from nodecycle.domain.sweep.budget_entries import StaleBudgetEntries
from nodecycle.domain.sweep.lifecycles import MAX_RESUMES, LifecycleRepair
from nodecycle.domain.sweep.sweeper import Counts, Sweeper, SweepFailed
from nodecycle_sandbox.aws import install
from nodecycle_sandbox.aws.dynamodb_index_lag import LAG
from nodecycle_sandbox.faults import Fault
from tests.functions.sweeper.test_adoption_race import first_steps, on_dynamodb
from tests.support.fakes import FakeAutoscaling, FakeClock, FakeMetrics, RecordingQueues
from tests.support.stack import Stack
from tests.unit.foundation.test_engine import PLAN, make_record
from tests.unit.sweeper.test_orphans import AMPLE, INTERVAL, OWNER, adopted
from tests.unit.sweeper.test_sweeper import (
    GRACE,
    MARGIN,
    AliveInstances,
    FakeBudget,
    FakeNodes,
    annotated,
    entry,
)


@pytest.fixture
def lagging(stack: Stack) -> Iterator[Stack]:
    install()  # the sandbox's DynamoDB: its indexes can lag
    yield stack
    LAG.disarm()


@dataclass
class Lifecycles:
    """The lifecycles' part of the sweep over DynamoDB, with Auto Scaling's actions in memory."""

    records: DynamoRecordStore
    clock: FakeClock = field(default_factory=FakeClock)
    queues: RecordingQueues = field(default_factory=RecordingQueues)
    autoscaling: FakeAutoscaling = field(default_factory=FakeAutoscaling)
    metrics: FakeMetrics = field(default_factory=FakeMetrics)

    def __post_init__(self) -> None:
        self.autoscaling.clock = self.clock

    def sweep(self) -> Counts:
        return self.part()(list(self.records.open_records(OWNER)), self.clock.now(), AMPLE)

    def part(self) -> LifecycleRepair:
        return LifecycleRepair(
            records=self.records,
            dispatcher=Dispatcher(
                records=self.records, queues=self.queues, clock=self.clock, metrics=self.metrics
            ),
            autoscaling=self.autoscaling,
            completion=CompleteAction(self.autoscaling, self.metrics, self.records),
            metrics=self.metrics,
            resume_grace=GRACE,
            margin=MARGIN,
            interval=INTERVAL,
            settle_before=INTERVAL + 2 * MARGIN,
            lateness=timedelta(seconds=60),  # (the schedule's minute, as settings reckon it)
            failure_result=lambda record: ActionResult.CONTINUE,
            clock=self.clock,
        )

    def moved_on(self, record: LifecycleRecord, **changes: object) -> LifecycleRecord:
        """The engine runs a step of ``record`` (its next seq), committed."""
        now = self.clock.now()
        moved = record.model_copy(update={"seq": record.seq + 1, "updated_at": now, "due_at": now, **changes})
        assert self.records.commit(moved, expected_seq=record.seq)
        return moved


def _store(stack: Stack) -> DynamoRecordStore:
    return DynamoRecordStore(stack.table, ttl=timedelta(days=1))


def test_an_action_completed_since_the_index_listed_its_record_is_not_counted_expired_nor_stalled(
    lagging: Stack,
) -> None:
    # Given a drain whose action's heartbeat deadline is near, the index listing it at EVICT
    world = Lifecycles(_store(lagging))
    record = make_record(PLAN, Step.EVICT, node="n1", seq=7)
    assert world.records.create(record)
    world.clock.current = record.heartbeat_deadline - MARGIN

    with LAG.held(lagging.table):
        # When the engine completes its action and moves on to its cleanup just before the sweep, the index
        # lagging behind that write
        assert world.autoscaling.complete(record.action, ActionResult.CONTINUE)
        moved = world.moved_on(
            record, step=Step.CLEANUP, result=ActionResult.CONTINUE, completed_at=world.clock.now()
        )
        (listed,) = world.records.open_records(OWNER)
        assert (listed.seq, listed.step) == (7, Step.EVICT)
        counts = world.sweep()

    # Then the sweep took the older version for nothing: no expired action (its alarm: "a node may have gone
    # undrained"), no stalled lifecycle, nothing sent; the record is the engine's
    assert world.metrics.counts.get("LifecycleActionsExpired", 0) == 0
    assert (counts["LifecyclesExpired"], counts["LifecyclesStalled"]) == (0, 0)
    assert world.queues.sent == []
    assert world.records.get(record.id) == moved


def test_a_lifecycle_over_that_the_index_still_lists_overdue_and_stuck_is_neither_counted_nor_resent(
    lagging: Stack,
) -> None:
    # Given a lifecycle resumed often, overdue by the version the index lists, whose heartbeat is not due
    world = Lifecycles(_store(lagging))
    record = make_record(
        PLAN, Step.EVICT, node="n1", seq=3, resumes=MAX_RESUMES, heartbeat_timeout=3600
    ).model_copy(update={"heartbeat_deadline": make_record(PLAN).due_at + timedelta(hours=1)})
    assert world.records.create(record)
    world.clock.advance((GRACE + INTERVAL).total_seconds())

    with LAG.held(lagging.table):
        # When its step ran at last and the lifecycle ended, the index lagging behind
        world.moved_on(record, step=Step.DONE, finished_at=world.clock.now(), resumes=0)
        assert [r.id for r in world.records.open_records(OWNER)] == [record.id]
        counts = world.sweep()

    # Then nothing is counted of it (the stalled and stuck alarms) nor sent again
    assert (counts["LifecyclesStalled"], counts["LifecyclesStuck"], counts["RepairsRaced"]) == (0, 0, 0)
    assert world.metrics.counts.get("LifecyclesStalled", 0) == 0
    assert world.queues.sent == []


def test_a_lifecycle_the_index_lists_at_an_older_version_is_judged_by_its_current_one(lagging: Stack) -> None:
    # Given a drain whose lost message the sweep resumes (overdue), whose action needs a heartbeat
    world = Lifecycles(_store(lagging))
    record = make_record(PLAN, Step.EVICT, node="n1", seq=4)
    assert world.records.create(record)
    world.clock.current = record.heartbeat_deadline - MARGIN

    with LAG.held(lagging.table):
        # When its step ran meanwhile (the next one due later), the index still listing the version before
        moved = world.moved_on(
            record, step=Step.RELEASE_EIP, due_at=world.clock.now() + timedelta(seconds=30)
        )
        counts = world.sweep()

    # Then its action is kept alive from the current version, which is not overdue: nothing resent, nothing
    # counted stalled, and the heartbeat is on the current record
    assert world.autoscaling.heartbeats == [record.action]
    assert (counts["LifecyclesKeptAlive"], counts["LifecyclesStalled"], counts["LifecyclesResumed"]) == (
        1,
        0,
        0,
    )
    assert world.queues.sent == []
    kept = world.records.get(record.id)
    assert kept is not None
    assert (kept.seq, kept.step, kept.heartbeats) == (moved.seq, Step.RELEASE_EIP, moved.heartbeats + 1)


def test_an_action_intake_recorded_that_the_index_does_not_list_yet_is_kept_alive_and_not_adopted(
    lagging: Stack,
) -> None:
    # Given a terminate action whose event intake took in while the index lags (for two sweeps, longer than
    # the adoption waits for intake)
    world = on_dynamodb(lagging)
    world.terminating()
    with LAG.held(lagging.table):
        assert world.intake.accept(world.event()) is IntakeOutcome.ACCEPTED
        assert list(world.records.open_records(OWNER)) == []

        # When the sweeps run, one adoption delay apart
        reports = [world.sweep()]
        world.clock.advance(INTERVAL.total_seconds())
        reports.append(world.sweep())

    # Then the action is kept alive meanwhile (probed by its instance), counted an orphan by neither (its claim
    # read: its lifecycle is written) and adopted by neither: one lifecycle, its event's, received once
    assert [(r["LifecyclesOrphaned"], r["LifecyclesAdopted"]) for r in reports] == [(0, 0), (0, 0)]
    assert len(world.autoscaling.heartbeats) == 2
    assert adopted(world) is None
    assert first_steps(world) == [world.event().record_id]
    assert world.metrics.counts["LifecycleActionsReceived"] == 1
    assert world.metrics.counts.get("LifecycleEventsDuplicate", 0) == 0


def test_budget_entries_and_annotations_of_a_lifecycle_missing_from_the_index_or_over_while_listed_are_judged_by_the_table(
    lagging: Stack,
) -> None:
    # Given two drains, each holding a slot and its node annotated, nodes and instances there: one whose record
    # the index does not list yet, one that ended while the index still lists it open
    records = _store(lagging)
    new = make_record(
        PLAN, Step.CORDON, id="i-0aaaaaaaaaaaaaaa1/terminate/t1", instance_id="i-0aaaaaaaaaaaaaaa1"
    )
    ended = make_record(
        PLAN, Step.CLEANUP, id="i-0aaaaaaaaaaaaaaa2/terminate/t2", instance_id="i-0aaaaaaaaaaaaaaa2"
    )
    assert records.create(ended)
    budget = FakeBudget([entry("n1", new.id, new.instance_id), entry("n2", ended.id, ended.instance_id)])
    nodes = FakeNodes(
        [annotated("n1", OWNER, new.instance_id, "t1"), annotated("n2", OWNER, ended.instance_id, "t2")]
    )
    clock, metrics = FakeClock(), FakeMetrics()
    part_budget = StaleBudgetEntries(
        budget=budget,
        records=records,
        node_names=nodes.node_names,
        alive_instances=AliveInstances({new.instance_id, ended.instance_id}),
        waker=Dispatcher(records=records, queues=RecordingQueues(), clock=clock, metrics=metrics),
    )
    part_annotations = LeftoverAnnotations(owner=OWNER, cluster=nodes, records=records, metrics=metrics)

    with LAG.held(lagging.table):
        assert records.create(new)
        done = ended.model_copy(update={"step": Step.DONE, "seq": ended.seq + 1, "finished_at": clock.now()})
        assert records.commit(done, expected_seq=ended.seq)
        listed = list(records.open_records(OWNER))
        assert [r.id for r in listed] == [ended.id]

        # When the sweep judges the budget and the annotations from that listing
        part_budget(listed, clock.now(), AMPLE)
        part_annotations(listed, clock.now(), AMPLE)

        # Then the drain missing from the listing keeps its slot and its annotations (its record read); the one
        # listed open keeps them this sweep (nothing is freed of a lifecycle listed open)
        assert budget.judged == {"n1": False, "n2": False}
        assert nodes.released == []

    # And once the index catches up, the ended one's slot and annotations are freed, the live one's kept
    listed = list(records.open_records(OWNER))
    part_budget(listed, clock.now(), AMPLE)
    part_annotations(listed, clock.now(), AMPLE)
    assert budget.judged == {"n1": False, "n2": True}
    assert nodes.released == ["n2"]


class Unreadable(DynamoRecordStore):
    """DynamoDB refusing GetItem (throttled past the client's retries) while it lists and writes."""

    def get(self, record_id: str) -> LifecycleRecord | None:
        raise TransientError("reading a lifecycle record: ProvisionedThroughputExceededException")


def test_an_action_whose_record_cannot_be_read_again_is_kept_alive_as_listed_and_the_sweep_fails(
    lagging: Stack,
) -> None:
    # Given a drain whose action's heartbeat deadline is near, and a DynamoDB that lists it but will not read it
    world = Lifecycles(Unreadable(lagging.table, ttl=timedelta(days=1)))
    record = make_record(PLAN, Step.EVICT, node="n1", seq=7)
    assert world.records.create(record)
    world.clock.current = record.heartbeat_deadline - MARGIN

    # When the sweep runs, Then the action is kept alive all the same (keeping actions alive comes first), and
    # the sweep fails (its alarm)
    with pytest.raises(SweepFailed, match="1 lifecycles could not be repaired"):
        world.sweep()
    assert world.autoscaling.heartbeats == [record.action]


FATES = ("untouched", "moved", "completed", "finished", "new")


def test_sweeps_from_listings_that_lag_a_random_share_of_the_writes_act_on_no_stale_version(
    lagging: Stack,
) -> None:
    # Given, in each of many cases, lifecycles draining (each holding a slot, its node annotated, its action's
    # heartbeat due) of which the engine moves some on, completes some, finishes some and intake writes new
    # ones, while the index lags half the writes (each drawn), so that the listing mixes what is current with
    # older versions, lifecycles over and lifecycles missing
    records = _store(lagging)
    cases = lagged = 0
    for seed in range(25):
        owner, rng = f"stack-{seed}", random.Random(seed)
        world = Lifecycles(records)
        world.clock.current = make_record(PLAN).heartbeat_deadline - MARGIN
        now = world.clock.now()
        fates = {f"t{seed}x{i}": rng.choice(FATES) for i in range(6)}
        drains = {
            token: make_record(
                PLAN,
                Step.EVICT,
                id=f"i-{seed:08d}{i:09d}/terminate/{token}",
                instance_id=f"i-{seed:08d}{i:09d}",
                token=token,
                owner=owner,
                node=f"n{i}",
                due_at=now,
                updated_at=now,
            )
            for i, token in enumerate(fates)
        }
        for token, record in drains.items():
            world.autoscaling.issue(token, record.instance_id)
            if fates[token] != "new":
                assert records.create(record)
        LAG.arm([Fault("lag", "dynamodb-index-lag", probability=0.5, value=3600)], seed=seed)
        for token, record in drains.items():
            fate = fates[token]
            if fate == "new":
                assert records.create(record)
            elif fate == "moved":
                world.moved_on(record, step=Step.RELEASE_EIP, due_at=now + timedelta(seconds=30))
            elif fate in ("completed", "finished"):
                assert world.autoscaling.complete(record.action, ActionResult.CONTINUE)
                done = (
                    {"step": Step.DONE, "finished_at": now} if fate == "finished" else {"step": Step.CLEANUP}
                )
                world.moved_on(record, result=ActionResult.CONTINUE, completed_at=now, **done)
        before = {token: records.get(record.id) for token, record in drains.items()}
        budget = FakeBudget(
            [
                entry(r.node or "", r.id, r.instance_id).model_copy(update={"owner": owner})
                for r in drains.values()
            ],
            owner=owner,
        )
        nodes = FakeNodes([annotated(r.node or "", owner, r.instance_id, t) for t, r in drains.items()])
        sweeper = Sweeper(
            owner=owner,
            records=records,
            clock=world.clock,
            metrics=world.metrics,
            parts={
                "lifecycles": world.part(),
                "budget": StaleBudgetEntries(
                    budget=budget,
                    records=records,
                    node_names=nodes.node_names,
                    alive_instances=AliveInstances({r.instance_id for r in drains.values()}),
                    waker=Dispatcher(
                        records=records, queues=world.queues, clock=world.clock, metrics=world.metrics
                    ),
                ),
                "annotations": LeftoverAnnotations(
                    owner=owner, cluster=nodes, records=records, metrics=world.metrics
                ),
            },
            shares={},
        )

        # When the sweep runs from the lagging listing
        report = sweeper.sweep(time_left=lambda: 300)
        cases += len(drains)
        lagged += len(LAG.firings())

        # Then nothing is counted of an older version (no expiry, no stall, no stuck lifecycle, no race lost)...
        counted = {
            name: world.metrics.counts.get(name, 0)
            for name in ("LifecycleActionsExpired", "LifecyclesStalled")
        }
        assert counted == {"LifecycleActionsExpired": 0, "LifecyclesStalled": 0}, (seed, fates)
        assert (report["LifecyclesStuck"], report["RepairsRaced"], report["RepairsFailed"]) == (0, 0, 0), seed
        # ...every open action listed is kept alive, on its current record; none that is over
        listed_open = {t for t, f in fates.items() if f in ("untouched", "moved")}
        heartbeated = {action.token for action in world.autoscaling.heartbeats}
        assert listed_open <= heartbeated <= listed_open | {t for t, f in fates.items() if f == "new"}, seed
        for token, record in drains.items():
            now_stored, was = records.get(record.id), before[token]
            assert now_stored is not None
            assert was is not None
            assert (now_stored.seq, now_stored.step) == (was.seq, was.step), (seed, fates[token])
            assert now_stored.heartbeats == was.heartbeats + (token in heartbeated), (seed, fates[token])
        # ...and no slot or annotation is freed but a finished lifecycle's
        finished_nodes = {drains[t].node for t, f in fates.items() if f == "finished"}
        assert {node for node, freed in budget.judged.items() if freed} <= finished_nodes, (seed, fates)
        assert set(nodes.released) <= finished_nodes, (seed, fates)
        assert world.queues.sent == [], seed
        LAG.disarm()
    assert cases == 150
    # (writes the index had not caught up with at the sweep: older versions, lifecycles over or missing)
    assert lagged > 50
