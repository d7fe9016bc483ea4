"""The whole sweep (the orphans' keep-alive, the lifecycles' repair, the adoptions) on the real record store
(DynamoDB on moto) while the open lifecycles' index lags the table for longer than a sweep interval (the sandbox's
lag: nodecycle_sandbox/aws/dynamodb_index_lag.py): a lifecycle intake wrote that the listing does not show is
found by the orphans' probe (its claim and record read), and is then the lifecycles' to repair as any listed
one: resumed when its message is lost, settled at its last chance. Kept alive only, its action would reach its
global timeout with nobody completing it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from nodecycle.domain.completion import CompleteAction
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.intake import IntakeOutcome
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.sweep.lifecycles import LifecycleRepair
from nodecycle.domain.sweep.sweeper import Counts, Sweeper
from nodecycle_sandbox.aws import install
from nodecycle_sandbox.aws.dynamodb_index_lag import LAG
from tests.functions.sweeper.test_adoption_race import on_dynamodb
from tests.support.stack import Stack
from tests.unit.foundation.test_engine import PLAN, make_record
from tests.unit.sweeper.test_orphans import INTERVAL, OWNER, TOKEN, World, adopted
from tests.unit.sweeper.test_sweeper import GRACE, MARGIN

SETTLE_BEFORE = INTERVAL + 2 * MARGIN


@pytest.fixture
def lagging(stack: Stack) -> Iterator[Stack]:
    install()  # the sandbox's DynamoDB: its indexes can lag
    yield stack
    LAG.disarm()


def sweeper(world: World) -> Sweeper:
    """The sweep's first three parts, in the function's order, over ``world``'s ports."""
    repair = LifecycleRepair(
        records=world.records,
        dispatcher=Dispatcher(
            records=world.records, queues=world.queues, clock=world.clock, metrics=world.metrics
        ),
        autoscaling=world.autoscaling,
        completion=CompleteAction(world.autoscaling, world.metrics, world.records),
        metrics=world.metrics,
        resume_grace=GRACE,
        margin=MARGIN,
        interval=INTERVAL,
        settle_before=SETTLE_BEFORE,
        lateness=timedelta(seconds=60),  # (the schedule's minute, as settings reckon it)
        failure_result=lambda record: ActionResult.CONTINUE,
        clock=world.clock,
    )
    return Sweeper(
        owner=OWNER,
        records=world.records,
        clock=world.clock,
        metrics=world.metrics,
        parts={"orphans": world.part.keep_alive, "lifecycles": repair, "adoptions": world.part.adopt},
        shares={},
    )


def accepted_unlisted(world: World) -> LifecycleRecord:
    """The action's event taken in by intake while the index lags: its record written, not listed."""
    world.terminating()
    assert world.intake.accept(world.event()) is IntakeOutcome.ACCEPTED
    record = world.records.get(world.event().record_id)
    assert record is not None
    assert record.id not in [listed.id for listed in world.records.open_records(OWNER)]
    return record


def sweeps(world: World, count: int) -> list[Counts]:
    reports = []
    for n in range(count):
        if n:
            world.clock.advance(INTERVAL.total_seconds())
        reports.append(sweeper(world).sweep(time_left=lambda: 300))
    return reports


def test_an_unlisted_lifecycle_at_its_last_chance_whose_queue_stalled_is_settled_by_the_sweep(
    lagging: Stack,
) -> None:
    world = on_dynamodb(lagging)
    with LAG.held(lagging.table):
        # Given a drain intake wrote while the index lags, whose first message was lost (its queue stalled), kept
        # alive by heartbeats until the sweep before its last chance
        record = accepted_unlisted(world)
        world.queues.sent.clear()
        world.clock.current = record.global_deadline - SETTLE_BEFORE - INTERVAL + timedelta(seconds=30)
        world.autoscaling.kept_alive(TOKEN, world.clock.now() - timedelta(seconds=60))

        # When two sweeps run an interval apart, the index not listing it throughout
        reports = sweeps(world, 2)

    # Then the first sends its step again (overdue), which the stalled queue does not run either, and the last
    # one before its global timeout completes its action (the failure result, as at any last chance); its
    # lifecycle goes on past the completion; nothing is adopted
    assert [(r["LifecyclesResumed"], r["LifecyclesSettled"]) for r in reports] == [(1, 0), (0, 1)]
    assert world.autoscaling.completed == [(record.action, ActionResult.CONTINUE)]
    settled = world.records.get(record.id)
    assert settled is not None
    assert (settled.step, settled.outcome) == (Step.CLEANUP, "settled-by-sweeper")
    assert [sent.message.step for sent in world.queues.sent] == [Step.ACQUIRE_SLOT, Step.CLEANUP]
    assert adopted(world) is None
    assert world.metrics.counts.get("LifecycleActionsExpired", 0) == 0


def test_an_unlisted_lifecycle_whose_message_was_lost_is_resumed_by_the_sweep(lagging: Stack) -> None:
    world = on_dynamodb(lagging)
    with LAG.held(lagging.table):
        # Given a drain intake wrote while the index lags, whose first message was lost
        record = accepted_unlisted(world)
        world.queues.sent.clear()
        world.clock.advance((GRACE + timedelta(seconds=30)).total_seconds())
        world.autoscaling.kept_alive(TOKEN, world.clock.now())

        # When the sweep runs, the index not listing it
        (report,) = sweeps(world, 1)

    # Then it is counted stalled and its step is sent again, as a listed one's would be
    assert (report["LifecyclesStalled"], report["LifecyclesResumed"]) == (1, 1)
    assert [(sent.message.record_id, sent.message.step) for sent in world.queues.sent] == [
        (record.id, record.step)
    ]


def test_the_report_counts_open_the_lifecycles_read_open_not_those_listed_that_are_over(
    lagging: Stack,
) -> None:
    world = on_dynamodb(lagging)
    # Given two drains listed open, their heartbeats due
    drains = [
        make_record(
            PLAN,
            Step.EVICT,
            id=f"i-0aaaaaaaaaaaaaaa{n}/terminate/t{n}",
            instance_id=f"i-0aaaaaaaaaaaaaaa{n}",
            token=f"t{n}",
        )
        for n in (1, 2)
    ]
    for drain in drains:
        assert world.records.create(drain)
    world.clock.current = drains[0].heartbeat_deadline - MARGIN
    with LAG.held(lagging.table):
        # When both end while the index lags (still listing them open, at their heartbeat), and intake writes
        # a third that it does not list yet, and the sweep runs
        for drain in drains:
            done = drain.model_copy(
                update={"step": Step.DONE, "seq": drain.seq + 1, "finished_at": world.clock.now()}
            )
            assert world.records.commit(done, expected_seq=drain.seq)
        accepted_unlisted(world)
        assert [r.id for r in world.records.open_records(OWNER)] == [d.id for d in drains]
        (report,) = sweeps(world, 1)

    # Then the report counts one lifecycle open, the one the table has open: not the two the index still
    # lists, which the sweep read over
    assert report["OpenLifecycles"] == 1
