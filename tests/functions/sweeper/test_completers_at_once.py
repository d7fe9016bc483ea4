"""Who completes a lifecycle action when two completers meet, on the real record store (DynamoDB on moto): two
sweeps at once at an action's last chance (EventBridge Scheduler may deliver a schedule twice), a sweep killed
between its claim and its completion, and a drain function whose commit DynamoDB refuses after its completion
landed. Every completer claims the record before it calls CompleteLifecycleAction (engine.claimed_for_completion):
the action is completed once, and the record never says it was settled elsewhere for a completion of ours."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle.domain.completion import SETTLED_ELSEWHERE, CompleteAction
from nodecycle.domain.engine import Handled, Outcome
from nodecycle.domain.errors import AccessRefused, TransientError
from nodecycle.domain.model import ActionRef, LifecycleRecord, Step
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.sweep.sweeper import Counts, SweepFailed
from tests.functions.test_engine_heartbeat_after_a_settlement import BeforeTheHeartbeat
from tests.support.fakes import FakeAutoscaling
from tests.support.stack import Stack
from tests.unit.foundation.test_engine import PLAN, Script, World, kept_alive, make_record
from tests.unit.sweeper.test_sweeper import (
    INTERVAL,
    MARGIN,
    Repair,
    killed_at_its_completion,
    stalled_at_its_last_chance,
)


class Meanwhile(FakeAutoscaling):
    """Auto Scaling, and what runs once while the first completion it takes is on its way back."""

    def __init__(self) -> None:
        super().__init__()
        self.meanwhile: list[Callable[[], object]] = []

    def complete(self, action: ActionRef, result: ActionResult) -> bool:
        completed = super().complete(action, result)
        if self.meanwhile:
            self.meanwhile.pop()()
        return completed


def repair_on(stack: Stack, autoscaling: FakeAutoscaling | None = None) -> Repair:
    repair = Repair(records=DynamoRecordStore(stack.table, ttl=timedelta(days=1)))  # type: ignore[arg-type]
    if autoscaling is not None:
        repair.autoscaling = autoscaling
        autoscaling.clock = repair.clock
    return repair


def settled_by_the_sweeper(repair: Repair, record_id: str) -> LifecycleRecord:
    settled = repair.records.get(record_id)
    assert settled is not None
    assert (settled.outcome, settled.result) == ("settled-by-sweeper", ActionResult.CONTINUE)
    assert settled.completed_at is not None
    assert SETTLED_ELSEWHERE not in settled.extra
    assert [result for _, result in repair.autoscaling.completed] == [ActionResult.CONTINUE]
    assert repair.metrics.counts.get("LifecycleActionsSettledElsewhere", 0) == 0
    assert repair.metrics.counts.get("LifecycleActionsExpired", 0) == 0
    return settled


@pytest.mark.usefixtures("stack")
def test_two_sweeps_at_once_at_an_actions_last_chance_complete_it_once_and_say_so(stack: Stack) -> None:
    # Given a stalled drain at its last chance, and a second delivery of the same sweep that runs while the
    # first one's CompleteLifecycleAction is on its way back (it landed)
    repair = repair_on(stack, Meanwhile())
    record_id = stalled_at_its_last_chance(repair)
    assert isinstance(repair.autoscaling, Meanwhile)
    second: list[Counts] = []
    repair.autoscaling.meanwhile.append(lambda: second.append(repair.run()))

    # When the first sweep settles it
    first = repair.run()

    # Then the action was completed once, by the first sweep, and the record says so: the second found the
    # first's claim and called nothing (before: it claimed over it, was told "no active lifecycle action", and
    # its commit beat the first's: the record said settled elsewhere, counted, the node told the action gone)
    assert (first["LifecyclesSettled"], second[0]["LifecyclesSettled"]) == (1, 0)
    settled_by_the_sweeper(repair, record_id)


@pytest.mark.usefixtures("stack")
def test_a_sweep_killed_between_its_claim_and_its_completion_is_finished_by_the_next_sweep(
    stack: Stack,
) -> None:
    # Given a stalled drain at its last chance, and a sweep that the runtime ends at its completion call (its
    # claim written, Auto Scaling not reached)
    repair = repair_on(stack)
    record_id = stalled_at_its_last_chance(repair)
    with killed_at_its_completion(repair.autoscaling):
        repair.run()
    claimed = repair.records.get(record_id)
    assert claimed is not None
    assert (claimed.step, claimed.completed_at) == (Step.COMPLETE, None)
    assert repair.queues.take() == []  # (killed: nothing sent on)

    # When the sweep is delivered again within the margin (a retry: the claim may be a completer's at work),
    # then the next sweep runs on schedule
    repair.clock.advance(MARGIN.total_seconds() / 2)
    retried = repair.run()
    repair.clock.advance(INTERVAL.total_seconds() - MARGIN.total_seconds() / 2)
    scheduled = repair.run()

    # Then the retry left the claim alone, and the next sweep took it over and completed the action once
    assert (retried["LifecyclesSettled"], scheduled["LifecyclesSettled"]) == (0, 1)
    settled = settled_by_the_sweeper(repair, record_id)
    assert [sent.message.step for sent in repair.queues.take()] == [settled.step]


@pytest.mark.usefixtures("stack")
def test_a_completion_whose_commit_is_refused_is_recorded_as_completed_not_settled_elsewhere(
    stack: Stack,
) -> None:
    # Given a drain at its completion whose CompleteLifecycleAction lands, and whose commit after it DynamoDB
    # refuses (throttled past the client's retries): the action done, the record still claimed and open
    world = World(records=DynamoRecordStore(stack.table, ttl=timedelta(days=1)))  # type: ignore[arg-type]
    world.autoscaling = Meanwhile()
    world.autoscaling.clock = world.clock
    record = make_record(PLAN, Step.COMPLETE, node="n1", seq=4, heartbeat_timeout=600)
    assert world.records.create(kept_alive(world.autoscaling, record, record.started_at))
    commit = world.records.commit
    refused: list[bool] = []

    def refuse_once(record: LifecycleRecord, expected_seq: int) -> bool:
        if not refused:
            refused.append(True)
            raise TransientError("ProvisionedThroughputExceededException")
        return commit(record, expected_seq)

    def refuse_the_next_commit() -> None:
        world.records.commit = refuse_once  # type: ignore[method-assign]

    world.autoscaling.meanwhile.append(refuse_the_next_commit)
    cleanup = Script([Outcome.wait(5)])
    engine = world.engine(
        {
            Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics, world.records),
            Step.CLEANUP: cleanup,
        }
    )
    message = world.message()
    with pytest.raises(TransientError):
        engine.handle(message)

    # When its message comes again (Lambda's redelivery), and each message it leads to at its time (a watch
    # once the step is overdue, the step re-sent)
    world.clock.advance(60)
    handled = [engine.handle(message)]
    while not cleanup.runs and (sent := world.queues.take()):
        world.clock.advance(sent[0].delay)
        handled.append(engine.handle(sent[0].message))

    # Then the action was completed once, and the record says it was completed with its result: the completion
    # that took over the claim of the run whose commit was refused was told "no active lifecycle action", which
    # is that run's completion (before: settled elsewhere, counted, the node told the action gone); no expiry
    moved = world.records.get(record.id)
    assert moved is not None
    assert (moved.step, moved.result, moved.outcome) == (Step.CLEANUP, ActionResult.CONTINUE, "completed")
    assert moved.completed_at is not None
    assert SETTLED_ELSEWHERE not in moved.extra
    assert len(world.autoscaling.completed) == 1
    assert world.metrics.counts.get("LifecycleActionsSettledElsewhere", 0) == 0
    assert world.metrics.counts.get("LifecycleActionsExpired", 0) == 0
    assert len(cleanup.runs) == 1
    # (the redelivered message found the claim's seq and watched; its watch re-sent the step)
    assert handled == [Handled.WATCHING, Handled.RESENT, Handled.RAN]


@pytest.mark.usefixtures("stack")
def test_a_settlement_refused_to_the_sweeper_leaves_no_claim_taken_for_a_completion_of_ours(
    stack: Stack,
) -> None:
    # Given a stalled drain at its last chance whose settlement Auto Scaling refuses to the sweeper's role
    repair = repair_on(stack)
    record_id = stalled_at_its_last_chance(repair)
    complete = repair.autoscaling.complete

    def refused(action: ActionRef, result: ActionResult) -> bool:
        raise AccessRefused("completing a lifecycle action", "AccessDenied", "explicit deny")

    repair.autoscaling.complete = refused  # type: ignore[method-assign]
    with pytest.raises(SweepFailed):
        repair.run()

    # When an operator completes the action by hand meanwhile, and the drain function runs the completion the
    # sweep sent on to it
    repair.autoscaling.complete = complete  # type: ignore[method-assign]
    repair.autoscaling.active = False
    (sent,) = repair.queues.take()
    repair.engine().handle(sent.message)

    # Then the record says the action was settled elsewhere, as it was (the sweeper's call was refused: no
    # completion of ours landed), not completed by the sweeper's vanished call
    settled = repair.records.get(record_id)
    assert settled is not None
    assert settled.completed_at is not None
    assert settled.extra.get(SETTLED_ELSEWHERE) is True
    assert repair.autoscaling.completed == []


@pytest.mark.usefixtures("stack")
def test_a_sweeps_heartbeat_after_a_completion_it_read_before_counts_no_expiry(stack: Stack) -> None:
    # Given a drain at its eviction whose heartbeat is due by the record (the sweep heartbeats it), and whose
    # eviction ends, its completion run inline and landed, between the sweep's read of the record and its
    # heartbeat
    world = World(records=DynamoRecordStore(stack.table, ttl=timedelta(days=1)))  # type: ignore[arg-type]
    world.autoscaling = autoscaling = (
        BeforeTheHeartbeat()
    )  # (a drain whose completion lands between a sweep's read and its heartbeat)
    autoscaling.clock = world.clock
    record = make_record((Step.EVICT, Step.COMPLETE, Step.CLEANUP, Step.DONE), Step.EVICT, node="n1", seq=4)
    world.clock.current = record.heartbeat_deadline - timedelta(seconds=MARGIN.total_seconds())
    record = record.model_copy(update={"due_at": world.clock.now()})  # (its poll due now: not stalled)
    assert world.records.create(kept_alive(autoscaling, record, world.clock.now() - timedelta(seconds=200)))
    engine = world.engine(
        {
            Step.EVICT: Script([Outcome.next()]),
            Step.COMPLETE: CompleteAction(autoscaling, world.metrics, world.records),
            Step.CLEANUP: Script([Outcome.wait(5)]),
        }
    )
    message = world.message()
    autoscaling.before_heartbeat.append(lambda: engine.handle(message))
    repair = Repair(
        clock=world.clock,
        records=world.records,
        queues=world.queues,
        autoscaling=autoscaling,
        metrics=world.metrics,
    )

    # When the sweep runs
    report = repair.run()

    # Then the action was completed once, by the drain, and nothing counts it expired (its alarm: a node may
    # have gone undrained) nor settled elsewhere
    assert report["LifecyclesExpired"] == 0
    assert world.metrics.counts.get("LifecycleActionsExpired", 0) == 0
    assert world.metrics.counts.get("LifecycleActionsSettledElsewhere", 0) == 0
    moved = world.records.get(record.id)
    assert moved is not None
    assert (moved.step, moved.outcome, moved.completed_at is not None) == (Step.CLEANUP, "completed", True)
    assert len(autoscaling.completed) == 1


@pytest.mark.usefixtures("stack")
@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({}, id="its action confirmed by a step"),
        # (no step ever ran, so no step confirmed its action: the sweeps kept it alive; the settlement confirms it)
        pytest.param({"verified_at": None}, id="stalled since its event, its action confirmed by none"),
    ],
)
def test_a_settlement_whose_commit_is_refused_after_its_completion_is_recorded_by_the_next_sweep(
    stack: Stack, changes: dict[str, object]
) -> None:
    # Given a stalled drain at its last chance, whose settlement's completion lands and whose commit after it
    # DynamoDB refuses (throttled past the client's retries): the action done, the record claimed and open
    repair = repair_on(stack, Meanwhile())
    record_id = stalled_at_its_last_chance(repair, **changes)
    assert isinstance(repair.autoscaling, Meanwhile)
    commit = repair.records.commit

    def refuse_once(record: LifecycleRecord, expected_seq: int) -> bool:
        repair.records.commit = commit  # type: ignore[method-assign]
        raise TransientError("ProvisionedThroughputExceededException")

    def refuse_the_next_commit() -> None:
        repair.records.commit = refuse_once  # type: ignore[method-assign]

    repair.autoscaling.meanwhile.append(refuse_the_next_commit)
    with pytest.raises(SweepFailed):
        repair.run()

    # When the next sweep runs, on schedule
    repair.clock.advance(INTERVAL.total_seconds())
    counts = repair.run()

    # Then it records the completion that landed as the sweeper's, with its result: no second result asked,
    # nothing counted settled elsewhere or expired; and the action confirmed before it (before, for one no step
    # confirmed: the claim did not say so, the next sweep's confirmation found the action gone and took it for one
    # never confirmed: settled elsewhere, its alarm, and the steps after it refused as for an unknown action)
    assert counts["LifecyclesSettled"] == 1
    settled = settled_by_the_sweeper(repair, record_id)
    assert settled.action_confirmed
    # ...and the action near its global timeout (the metric that pages) is counted once, by the sweep that claimed
    # it, not again by the one that recorded its completion
    assert repair.metrics.counts["GlobalTimeoutsNear"] == 1


@pytest.mark.usefixtures("stack")
def test_a_settlement_whose_claim_is_refused_counts_its_action_near_its_global_timeout_once(
    stack: Stack,
) -> None:
    # Given a stalled drain at its last chance, whose settlement's claim DynamoDB refuses once (throttled past the
    # client's retries): nothing claimed, nothing completed
    repair = repair_on(stack)
    record_id = stalled_at_its_last_chance(repair)
    commit = repair.records.commit

    def refuse_the_claim(record: LifecycleRecord, expected_seq: int) -> bool:
        if "completion_claim" in record.extra:
            repair.records.commit = commit  # type: ignore[method-assign]
            raise TransientError("ProvisionedThroughputExceededException")
        return commit(record, expected_seq)

    repair.records.commit = refuse_the_claim  # type: ignore[method-assign]
    with pytest.raises(SweepFailed):
        repair.run()
    assert repair.autoscaling.completed == []

    # When the next sweep runs, on schedule
    repair.clock.advance(INTERVAL.total_seconds())
    counts = repair.run()

    # Then it settles the action, counted near its global timeout (the metric that pages) once: by the settlement
    # whose claim landed, not by the one whose claim was refused
    assert counts["LifecyclesSettled"] == 1
    settled_by_the_sweeper(repair, record_id)
    assert repair.metrics.counts["GlobalTimeoutsNear"] == 1


@pytest.mark.usefixtures("stack")
def test_an_action_the_engines_guard_moved_to_its_completion_is_not_counted_again_by_the_sweeper(
    stack: Stack,
) -> None:
    # Given a drain the engine's guard moved to its completion near the global timeout (counted there), whose
    # completion then stalled (its queue): at the sweeper's last chance
    repair = repair_on(stack)
    record_id = stalled_at_its_last_chance(
        repair, step=Step.COMPLETE, result=ActionResult.CONTINUE, outcome="global-timeout-near"
    )

    # When the sweep settles it
    counts = repair.run()

    # Then the action is completed with the guard's result and outcome, and not counted near its global timeout a
    # second time (the metric pages once per action: the guard's count)
    assert counts["LifecyclesSettled"] == 1
    settled = repair.records.get(record_id)
    assert settled is not None
    assert (settled.outcome, settled.completed_at is not None) == ("global-timeout-near", True)
    assert [result for _, result in repair.autoscaling.completed] == [ActionResult.CONTINUE]
    assert repair.metrics.counts.get("GlobalTimeoutsNear", 0) == 0
