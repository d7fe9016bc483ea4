"""The sweeper's parts with in-memory ports: lost messages, actions near their global timeout, stale budget
entries, leftover annotations, and a failing part that does not stop the others."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any

import pytest

from nodecycle.domain.budget import Holder, SweepResult, Verdict, Waiter
from nodecycle.domain.catalog import LifecycleHooks
from nodecycle.domain.completion import CompleteAction, ended_by
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.engine import Outcome, StepEngine, StepHandler
from nodecycle.domain.errors import TransientError
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import ENDS_ITS_INSTANCE, ActionRef, LifecycleRecord, Step, global_deadline
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.cluster import Claim, NodeInfo
from nodecycle.domain.ports.lifecycle import WorkMessage
from nodecycle.domain.sweep.annotations import LeftoverAnnotations
from nodecycle.domain.sweep.budget_entries import StaleBudgetEntries
from nodecycle.domain.sweep.lifecycles import MAX_RESUMES, LifecycleRepair
from nodecycle.domain.sweep.sweep_time import LIFECYCLES_SHARE, SHARES, SweepTime
from nodecycle.domain.sweep.sweeper import Counts, Sweeper, SweepFailed, SweepPart
from tests.support.fakes import T0, FakeAutoscaling, FakeClock, FakeMetrics, InMemoryRecords, RecordingQueues
from tests.unit.foundation.test_engine import PLAN, Script, kept_alive, make_record
from tests.unit.foundation.test_engine import World as EngineWorld
from tests.unit.sweeper.test_orphans import AMPLE, TOKEN, World

GRACE = timedelta(minutes=3)
MARGIN = timedelta(seconds=60)
INTERVAL = timedelta(minutes=5)  # between two sweeps


@dataclass
class Repair:
    clock: FakeClock = field(default_factory=FakeClock)
    records: InMemoryRecords = field(default_factory=InMemoryRecords)
    queues: RecordingQueues = field(default_factory=RecordingQueues)
    autoscaling: FakeAutoscaling = field(default_factory=FakeAutoscaling)
    metrics: FakeMetrics = field(default_factory=FakeMetrics)
    failure: ActionResult = ActionResult.CONTINUE
    grace: timedelta = GRACE
    margin: timedelta = MARGIN
    interval: timedelta = INTERVAL
    settle_before: timedelta = INTERVAL + 2 * MARGIN  # as settings: the later of this and margin + redelivery
    # as settings: how late in its minute a sweep on schedule may come (the schedule's minute, no less than the margin)
    lateness: timedelta = timedelta(seconds=60)
    hooks: LifecycleHooks | None = (
        None  # the hooks as Auto Scaling tells them now (None: the records' timeouts)
    )

    def __post_init__(self) -> None:
        self.autoscaling.clock = self.clock  # Auto Scaling's timeouts run on the test's clock

    def part(self) -> LifecycleRepair:
        return LifecycleRepair(
            records=self.records,
            dispatcher=Dispatcher(
                records=self.records, queues=self.queues, clock=self.clock, metrics=self.metrics
            ),
            autoscaling=self.autoscaling,
            completion=CompleteAction(self.autoscaling, self.metrics, self.records),
            metrics=self.metrics,
            resume_grace=self.grace,
            margin=self.margin,
            interval=self.interval,
            settle_before=self.settle_before,
            lateness=self.lateness,
            failure_result=lambda record: self.failure,
            clock=self.clock,
            hooks=self.hooks,
        )

    def run(self) -> Counts:
        return self.part()(list(self.records.open_records("stack-a")), self.clock.now(), AMPLE)

    def engine(self, cleanup: StepHandler | None = None) -> StepEngine:
        """The drain function's engine over the same ports, from the completion on (``cleanup``: a wait unless told),
        as it runs what a sweep sends on."""
        return EngineWorld(
            clock=self.clock,
            records=self.records,
            queues=self.queues,
            autoscaling=self.autoscaling,
            metrics=self.metrics,
        ).engine(
            {
                Step.COMPLETE: CompleteAction(self.autoscaling, self.metrics, self.records),
                Step.CLEANUP: cleanup or Script([Outcome.wait(5)]),
            }
        )


def stalled_at_its_last_chance(repair: Repair, **changes: Any) -> str:
    """A stalled lifecycle (a drain at its eviction, unless ``changes`` say another step) at the last sweep before its
    action's global timeout, kept alive so far (a hook of 600 s: longer than an interval and a margin, as settings
    require); its id."""
    repair.autoscaling.action_timeout = 600
    # (its global timeout as Auto Scaling's for a hook of 600 s: 100 heartbeat timeouts from its start)
    drain: dict[str, Any] = {
        "step": Step.EVICT,
        "node": "n1",
        "seq": 4,
        "heartbeat_timeout": 600,
        "global_deadline": global_deadline(T0, 600),
    }
    record = make_record(PLAN, **drain | changes)
    repair.clock.current = record.global_deadline - INTERVAL - MARGIN
    assert repair.records.create(
        kept_alive(repair.autoscaling, record, repair.clock.now() - timedelta(seconds=100))
    )
    return record.id


def test_a_lifecycle_whose_message_was_lost_is_resumed_under_a_new_seq() -> None:
    repair = Repair()
    repair.records.create(make_record(PLAN, Step.EVICT, node="n1", seq=7))
    repair.clock.advance(GRACE.total_seconds() + 1)
    assert repair.run()["LifecyclesResumed"] == 1
    (sent,) = repair.queues.take()
    assert (sent.message.step, sent.message.seq) == (Step.EVICT, 8)


def test_each_lifecycle_is_judged_at_the_time_the_sweep_reaches_it_not_when_the_sweep_began() -> None:
    # Given two lifecycles, in the order the index lists them (earliest due first): the first one's heartbeat
    # takes 10 s (Auto Scaling throttled, its calls retried), and the second one's step becomes overdue
    # during those 10 s (its message was lost); each its own action
    repair = Repair()
    waiting = T0 - GRACE + timedelta(seconds=1)  # due, not overdue: within the resume grace
    repair.autoscaling.issue("a", "i-1")
    repair.autoscaling.issue("b", "i-2")
    repair.records.create(
        make_record(
            PLAN, Step.EVICT, node="n1", id="i-1/terminate/a", instance_id="i-1", token="a", due_at=waiting
        )
    )
    lost = T0 + timedelta(seconds=5) - GRACE  # overdue from 5 s after the sweep begins
    repair.records.create(
        make_record(
            PLAN, Step.EVICT, node="n2", id="i-2/terminate/b", instance_id="i-2", token="b", due_at=lost
        )
    )
    heartbeat = repair.autoscaling.heartbeat

    def slow_heartbeat(action: ActionRef) -> bool:
        if action.instance_id == "i-1":
            repair.clock.advance(10)
        return heartbeat(action)

    repair.autoscaling.heartbeat = slow_heartbeat  # type: ignore[method-assign]
    started = repair.clock.now()

    # When the sweep runs
    counts = repair.part()(list(repair.records.open_records("stack-a")), started, AMPLE)

    # Then the second lifecycle is resumed now, not one sweep later (seen under AWS throttling: a sweep that
    # took 10 s judged a lost message "not yet overdue" by its start time, and a drain went unpolled 20 s)
    assert counts["LifecyclesResumed"] == 1
    (sent,) = repair.queues.take()
    assert sent.message.record_id == "i-2/terminate/b"


def test_a_lifecycle_that_is_only_waiting_is_left_alone() -> None:
    repair = Repair()
    repair.records.create(make_record(PLAN, Step.EVICT, due_at=T0 + timedelta(minutes=10)))
    repair.clock.advance(GRACE.total_seconds() + 1)
    assert repair.run()["LifecyclesResumed"] == 0
    assert repair.queues.take() == []


def test_a_stalled_lifecycle_is_kept_alive_across_the_next_sweep_and_reported() -> None:
    # Given a drain whose work queue has stalled: its step is overdue, and its action's heartbeat deadline
    # falls before the next sweep
    repair = Repair()
    record = make_record(PLAN, Step.EVICT, node="n1", seq=7)
    repair.records.create(record)
    repair.clock.current = record.heartbeat_deadline - MARGIN

    # When the sweeper runs
    counts = repair.run()

    # Then it records a heartbeat (the action lives one more heartbeat timeout), resends the step, and
    # counts the lifecycle as stalled, for the alarm
    assert repair.autoscaling.heartbeats == [record.action]
    kept = repair.records.get(record.id)
    assert kept is not None
    assert kept.heartbeat_deadline == repair.clock.now() + timedelta(seconds=record.heartbeat_timeout)
    assert kept.heartbeats == 1
    assert counts["LifecyclesStalled"] == 1
    assert counts["LifecyclesResumed"] == 1
    assert repair.metrics.counts["LifecyclesStalled"] == 1


def test_a_stuck_lifecycle_is_kept_alive_too() -> None:
    # Given a lifecycle resumed too often (its step keeps failing), whose heartbeat deadline is near
    repair = Repair()
    record = make_record(PLAN, Step.EVICT, node="n1", resumes=MAX_RESUMES)
    repair.records.create(record)
    repair.clock.current = record.heartbeat_deadline - MARGIN
    # When the sweeper runs, Then it is reported stuck, and its action does not time out meanwhile
    assert repair.run()["LifecyclesStuck"] == 1
    assert repair.autoscaling.heartbeats == [record.action]


def test_a_lifecycle_whose_deadline_is_beyond_the_next_sweep_is_not_heartbeated() -> None:
    repair = Repair()
    record = make_record(PLAN, Step.EVICT, node="n1", heartbeat_timeout=3600)
    record = record.model_copy(update={"heartbeat_deadline": T0 + timedelta(hours=1)})
    repair.records.create(record)
    repair.clock.advance(GRACE.total_seconds() + 1)
    repair.run()
    assert repair.autoscaling.heartbeats == []


def test_an_action_whose_deadline_comes_before_a_late_next_sweep_is_heartbeated() -> None:
    # Given an action whose heartbeat deadline comes after the next sweep's start on schedule, but before a
    # next sweep that starts late (one sweep at a time: a slow sweep pushes the next one back)
    repair = Repair()
    record = make_record(PLAN, Step.EVICT, node="n1", seq=7)
    repair.records.create(record)
    repair.clock.current = record.heartbeat_deadline - INTERVAL - MARGIN - timedelta(seconds=30)

    # When the sweeper runs, Then it heartbeats the action now rather than trust the next sweep to be on time
    repair.run()
    assert repair.autoscaling.heartbeats == [record.action]


def test_a_stalled_action_found_no_longer_active_goes_past_its_completion() -> None:
    # Given a stalled lifecycle whose action Auto Scaling no longer has (timed out, or completed elsewhere)
    repair = Repair()
    repair.autoscaling.active = False
    record = make_record(PLAN, Step.EVICT, node="n1")
    repair.records.create(record)
    repair.clock.current = record.heartbeat_deadline - MARGIN
    # When the sweeper runs, Then the lifecycle goes on to its cleanup, with the reason
    repair.run()
    moved = repair.records.get(record.id)
    assert moved is not None
    assert (moved.step, moved.outcome) == (Step.CLEANUP, "action-expired")


def test_a_completion_killed_after_it_ended_its_instance_still_tells_its_cleanup_so_when_the_sweep_finds_the_action_gone() -> (
    None
):
    # Given a drain whose completion was killed after it wrote its instance's state-change lifecycle over (EC2's
    # state changes of the termination start nothing) and before it completed the action, which timed out
    # while its message waited to be delivered again
    repair = Repair()
    record = make_record(PLAN, Step.COMPLETE, node="n1", seq=7)
    repair.records.create(record)
    ended = ended_by(record, T0)
    assert ended is not None
    repair.records.create(ended)
    repair.autoscaling.active = False
    repair.clock.current = record.heartbeat_deadline - MARGIN

    # When the sweep runs, and then the killed step's message comes again, and whatever the sweep sent
    repair.run()
    engine = EngineWorld(
        clock=repair.clock, records=repair.records, queues=repair.queues, autoscaling=repair.autoscaling
    ).engine(
        {
            Step.COMPLETE: CompleteAction(repair.autoscaling, repair.metrics, repair.records),
            Step.CLEANUP: Script([Outcome.wait(5)]),
        }
    )
    for message in [
        WorkMessage(record_id=record.id, seq=7, step=Step.COMPLETE),
        *(sent.message for sent in repair.queues.take()),
    ]:
        engine.handle(message)

    # Then the lifecycle reaches its cleanup told that it ends its instance: that cleanup frees what the state
    # change's lifecycle would have (this owner's other budget entries of the instance, another lifecycle's
    # annotations), since nothing else will at once
    moved = repair.records.get(record.id)
    assert moved is not None
    assert (moved.step, moved.extra.get(ENDS_ITS_INSTANCE)) == (Step.CLEANUP, True)


def test_an_overdue_action_near_its_global_timeout_is_completed_by_the_sweeper_itself() -> None:
    # Given a lifecycle whose work has been stuck until shortly before its action's global timeout (no
    # address to release)
    repair = Repair()
    record = make_record(tuple(step for step in PLAN if step is not Step.RELEASE_EIP), Step.EVICT, node="n1")
    repair.clock.current = record.global_deadline - MARGIN
    # (its last heartbeat less than a heartbeat timeout ago: one exactly 300 s ago ended the action now, as
    # Auto Scaling ends an action at its deadline; so in the tests below)
    repair.records.create(kept_alive(repair.autoscaling, record, repair.clock.now() - INTERVAL + MARGIN))

    # When the sweeper runs
    counts = repair.run()

    # Then the action is completed with the failure result, and the cleanup is sent on
    assert counts["LifecyclesSettled"] == 1
    ((_, result),) = repair.autoscaling.completed
    assert result is ActionResult.CONTINUE
    swept = repair.records.get(record.id)
    assert swept is not None
    assert (swept.step, swept.outcome, swept.completed_at) == (
        Step.CLEANUP,
        "settled-by-sweeper",
        repair.clock.now(),
    )
    assert [s.message.step for s in repair.queues.take()] == [Step.CLEANUP]


def test_an_action_the_sweeper_settles_before_its_release_has_its_address_taken_back_right_after() -> None:
    # Given a stalled drain at the last sweep before its action's global timeout, its plan releasing the
    # instance's address after the drain
    repair = Repair()
    record = make_record(PLAN, Step.EVICT, node="n1")
    repair.clock.current = record.global_deadline - MARGIN
    repair.records.create(kept_alive(repair.autoscaling, record, repair.clock.now() - INTERVAL + MARGIN))

    # When the sweeper settles it
    assert repair.run()["LifecyclesSettled"] == 1

    # Then the action is completed first, and the release is sent on to the eip worker rather than skipped
    # (an instance going back to its warm pool would keep the address, out of the address sweep's reach)
    assert len(repair.autoscaling.completed) == 1
    swept = repair.records.get(record.id)
    assert swept is not None
    assert (swept.step, swept.completed_at) == (Step.RELEASE_EIP, repair.clock.now())
    assert [(s.worker, s.message.step) for s in repair.queues.take()] == [(Worker.EIP, Step.RELEASE_EIP)]
    assert swept.plan[swept.plan.index(Step.RELEASE_EIP) + 1 :] == (Step.CLEANUP, Step.DONE)


def test_an_overdue_action_is_settled_by_the_last_sweep_that_comes_before_its_global_timeout() -> None:
    # Given a stalled lifecycle, 3 minutes before its action's global timeout: the next sweep (5 minutes on)
    # would come too late to complete it
    repair = Repair()
    record = make_record(PLAN, Step.EVICT, node="n1")
    repair.clock.current = record.global_deadline - timedelta(minutes=3)
    repair.records.create(kept_alive(repair.autoscaling, record, repair.clock.now() - INTERVAL + MARGIN))

    # When the sweeper runs, Then it completes the action now, rather than leave it to Auto Scaling's default
    assert repair.run()["LifecyclesSettled"] == 1
    assert len(repair.autoscaling.completed) == 1
    # while one that the next sweep can still settle in time is resumed, its drain given the time left
    early = Repair()
    early.clock.current = record.global_deadline - INTERVAL - 2 * MARGIN - timedelta(seconds=1)
    early.records.create(kept_alive(early.autoscaling, record, early.clock.now() - INTERVAL + MARGIN))
    assert early.run()["LifecyclesResumed"] == 1
    assert early.autoscaling.completed == []


def test_the_last_sweep_settles_an_action_even_when_its_heartbeat_is_throttled() -> None:
    # Given a stalled lifecycle at the last sweep before its action's global timeout, and Auto Scaling
    # throttling heartbeats (botocore's retries spent)
    repair = Repair()
    record = make_record(PLAN, Step.EVICT, node="n1")
    repair.clock.current = record.global_deadline - timedelta(minutes=3)
    repair.records.create(kept_alive(repair.autoscaling, record, repair.clock.now() - INTERVAL + MARGIN))

    def throttled(action: ActionRef) -> bool:
        raise TransientError("Throttling: Rate exceeded")

    repair.autoscaling.heartbeat = throttled  # type: ignore[method-assign]

    # When the sweeper runs, Then it still completes the action: there is no later sweep to do it
    assert repair.run()["LifecyclesSettled"] == 1
    ((action, result),) = repair.autoscaling.completed
    assert (action, result) == (record.action, ActionResult.CONTINUE)


def test_the_last_sweep_settles_an_action_even_when_its_heartbeat_is_denied() -> None:
    # Given a stalled lifecycle at the only sweep left before its action's global timeout (the next one comes
    # after it), and Auto Scaling refusing the sweeper's heartbeats though not its completions (a policy
    # edited by hand: the adapter raises botocore's ClientError for AccessDenied as it is, not as transient)
    repair = Repair()
    record = make_record(PLAN, Step.EVICT, node="n1")
    repair.clock.current = record.global_deadline - timedelta(minutes=3)
    repair.records.create(kept_alive(repair.autoscaling, record, repair.clock.now() - INTERVAL + MARGIN))

    def denied(action: ActionRef) -> bool:
        raise PermissionError("AccessDenied: not authorized to perform RecordLifecycleActionHeartbeat")

    repair.autoscaling.heartbeat = denied  # type: ignore[method-assign]

    # When the sweeper runs, Then it still completes the action: a completion needs no heartbeat, and no
    # later sweep comes before Auto Scaling would apply the hook's default result to an undrained node
    assert repair.run()["LifecyclesSettled"] == 1
    ((action, result),) = repair.autoscaling.completed
    assert (action, result) == (record.action, ActionResult.CONTINUE)


@pytest.mark.parametrize(
    ("late", "grace", "beat", "due"),
    [
        # the engine's poll is due 150 s before the global timeout, and only 20 s late at the last sweep
        (130, GRACE, 160, 150),
        # a short hook: its heartbeat deadline 15 s before the global timeout, its next run not yet due
        (119, timedelta(seconds=120), 315, 100),
    ],
    ids=["late-less-than-the-grace", "heartbeat-deadline-in-the-last-window"],
)
def test_the_last_sweep_before_the_global_timeout_settles_an_open_action_that_is_not_overdue_yet(
    late: int, grace: timedelta, beat: int, due: int
) -> None:
    # Given a lifecycle whose queue stalls near its action's global timeout, its next run due shortly before
    # it (not yet overdue at the last sweep: late by less than the resume grace, or not even due)
    repair = Repair(grace=grace)
    record = make_record(PLAN, Step.EVICT, node="n1", seq=40)
    end = record.global_deadline
    record = kept_alive(repair.autoscaling, record, end - timedelta(seconds=beat))
    repair.records.create(record.model_copy(update={"due_at": end - timedelta(seconds=due)}))

    # When the last sweep that comes before the global timeout runs
    repair.clock.current = end - timedelta(seconds=late)
    assert repair.clock.now() + INTERVAL > end
    counts = repair.run()

    # Then it completes the action itself (the queue may not move again before the global timeout)
    assert counts["LifecyclesSettled"] == 1
    ((action, result),) = repair.autoscaling.completed
    assert (action, result) == (record.action, ActionResult.CONTINUE)


def test_the_sweeper_settles_nothing_from_a_list_that_lags_behind_the_lifecycle() -> None:
    # Given a lifecycle near its action's global timeout that the index still lists as overdue at EVICT, while
    # the engine has meanwhile moved it on (its launch gate found the node Ready; the index lags)
    repair = Repair()
    listed = make_record(PLAN, Step.EVICT, node="n1")
    repair.clock.current = listed.global_deadline - MARGIN
    listed = kept_alive(repair.autoscaling, listed, repair.clock.now() - INTERVAL)
    moved = listed.model_copy(
        update={"seq": listed.seq + 1, "step": Step.COMPLETE, "due_at": repair.clock.now()}
    )
    repair.records.create(moved)

    # When the sweeper works from the lagging list
    counts = repair.part()([listed], repair.clock.now(), AMPLE)

    # Then it completes nothing with its failure result: the lifecycle is the engine's
    assert repair.autoscaling.completed == []
    assert counts["LifecyclesSettled"] == 0


def test_an_action_already_decided_is_completed_by_the_sweeper_with_its_own_result() -> None:
    # Given a launch whose node was found Ready (result CONTINUE decided) but whose completion message was
    # lost until shortly before the global timeout, on a stack whose failure result is ABANDON
    repair = Repair(failure=ActionResult.ABANDON)
    launch = (Step.READY_GATE, Step.COMPLETE, Step.DONE)
    record = make_record(launch, Step.COMPLETE, result=ActionResult.CONTINUE, outcome="node-ready")
    repair.clock.current = record.global_deadline - MARGIN
    repair.records.create(kept_alive(repair.autoscaling, record, repair.clock.now() - INTERVAL + MARGIN))

    # When the sweeper settles it
    repair.run()

    # Then it completes with the decided result: a Ready node is not abandoned for being late
    ((_, result),) = repair.autoscaling.completed
    assert result is ActionResult.CONTINUE


def test_a_launch_past_its_steps_is_completed_by_the_sweeper_as_the_engine_would_not_abandoned() -> None:
    # Given a launch whose node was found Ready (the gate decides no result: the completion's default,
    # CONTINUE, follows) but whose completion message was lost until shortly before the global timeout, on
    # a stack whose failure result is ABANDON
    repair = Repair(failure=ActionResult.ABANDON)
    launch = (Step.READY_GATE, Step.COMPLETE, Step.DONE)
    record = make_record(launch, Step.COMPLETE, outcome="node-ready")
    repair.clock.current = record.global_deadline - MARGIN
    repair.records.create(kept_alive(repair.autoscaling, record, repair.clock.now() - INTERVAL + MARGIN))

    # When the sweeper settles it
    repair.run()

    # Then it completes as the engine would have: a healthy instance is not abandoned for a lost message
    ((_, result),) = repair.autoscaling.completed
    assert result is ActionResult.CONTINUE
    stored = repair.records.get(record.id)
    assert stored is not None
    assert stored.outcome == "node-ready"


def test_a_lifecycle_resumed_too_often_is_reported_stuck_and_not_sent_again_at_once() -> None:
    repair = Repair()
    repair.records.create(make_record(PLAN, Step.EVICT, resumes=MAX_RESUMES))
    repair.clock.advance(GRACE.total_seconds() + 1)
    counts = repair.run()
    assert (counts["LifecyclesResumed"], counts["LifecyclesStuck"]) == (0, 1)
    assert repair.metrics.counts["LifecyclesStuck"] == 1


def long_drain_at_evict(repair: Repair, **changes: object) -> LifecycleRecord:
    """A drain at EVICT (cordoned, partly evicted) whose hook has a heartbeat timeout of an hour: its action
    lives 48 h at most."""
    record = make_record(PLAN, Step.EVICT, node="n1", seq=7, heartbeat_timeout=3600, **changes)
    record = record.model_copy(update={"heartbeat_deadline": record.started_at + timedelta(hours=1)})
    repair.autoscaling.action_timeout = 3600
    repair.records.create(record)
    return record


def test_a_lifecycle_whose_resends_were_all_dead_lettered_resumes_once_the_function_works() -> None:
    # Given a drain at EVICT, and a drain function failing at init for half an hour (after a bad update):
    # each message the sweeper re-sends is received five times and dead-lettered, the record does not move
    repair = Repair()
    long_drain_at_evict(repair)
    for _ in range(MAX_RESUMES + 1):
        repair.clock.advance(INTERVAL.total_seconds())
        repair.run()
        repair.queues.take()  # dead-lettered

    # When the function works again and the next sweep comes
    repair.clock.advance(INTERVAL.total_seconds())
    counts = repair.run()

    # Then the step is sent again (the runbook: the overdue lifecycles resume on their own), and the
    # lifecycle is still reported stuck, for the alarm
    (sent,) = repair.queues.take()
    assert sent.message.step is Step.EVICT
    assert (counts["LifecyclesResumed"], counts["LifecyclesStuck"]) == (1, 1)


def test_a_stuck_lifecycle_is_sent_again_less_and_less_often_until_its_global_timeout() -> None:
    # Given a drain whose step keeps failing the same way (every message dead-lettered): resumed five times
    repair = Repair()
    record = long_drain_at_evict(repair, resumes=MAX_RESUMES)

    # When the sweeper runs every interval until the action's global timeout
    resent: list[datetime] = []
    sweeps = stuck = 0
    while repair.clock.now() < record.global_deadline - 2 * INTERVAL:
        repair.clock.advance(INTERVAL.total_seconds())
        stuck += repair.run()["LifecyclesStuck"]
        sweeps += 1
        resent += [repair.clock.now() for s in repair.queues.take() if s.message.step is Step.EVICT]

    # Then its step is sent again after 2, 4, 8 intervals, then every 12 (an hour): a fixed step gets its
    # chance within the hour, a failing one costs a few dead letters an hour; the action is kept alive
    # meanwhile, and the lifecycle reported stuck at every sweep
    gaps = [later - earlier for earlier, later in pairwise([record.updated_at, *resent])]
    assert gaps[:4] == [2 * INTERVAL, 4 * INTERVAL, 8 * INTERVAL, 12 * INTERVAL]
    assert set(gaps[4:]) == {12 * INTERVAL}
    assert repair.autoscaling.completed == []
    assert stuck == sweeps


def entry(node: str, record_id: str, instance: str) -> Holder:
    return Holder(
        node=node,
        instance_id=instance,
        zone="eu-west-1a",
        owner="stack-a",
        record_id=record_id,
        renewed_at=T0,
        ttl_seconds=300,
        acquired_at=T0,
    )


class AliveInstances:
    """EC2 as the sweeper asks it: of the instances asked about, those that are alive; never others."""

    def __init__(self, alive: set[str]) -> None:
        self._alive = alive
        self.asked: list[set[str]] = []

    def __call__(self, instance_ids: Collection[str]) -> set[str]:
        self.asked.append(set(instance_ids))
        return set(instance_ids) & self._alive


@dataclass
class FakeBudget:
    """The budget's sweep as DisruptionBudget does it: ``stale`` judges this owner's live entries only (not
    asked when there are none); its expired ones go unjudged."""

    entries: list[Holder]
    wake: tuple[str, ...] = ()
    judged: dict[str, bool] = field(default_factory=dict)
    owner: str = "stack-a"
    now: datetime = T0

    def sweep(self, *, stale: Callable[[Sequence[Holder | Waiter]], Verdict]) -> SweepResult:
        mine = [e for e in self.entries if e.owner == self.owner]
        live = [e for e in mine if not e.expired(self.now)]
        doomed = stale(live).stale if live else frozenset()
        self.judged = {e.node: e.record_id in doomed for e in live}
        removed = tuple(e for e in mine if e.expired(self.now) or self.judged[e.node])
        return SweepResult(holders=removed, waiters=(), wake=self.wake)


def test_budget_entries_of_gone_instances_and_finished_lifecycles_are_stale_not_of_a_gone_node_alone() -> (
    None
):
    # Given four holders: a live one, one whose node is gone (its lifecycle open: a node object deleted under its
    # running instance, whose pods its drain evicts), one whose instance is gone, one whose record is gone
    live = make_record(PLAN, Step.EVICT, id="i-1/terminate/a", instance_id="i-1")
    no_node = make_record(PLAN, Step.EVICT, id="i-2/terminate/b", instance_id="i-2")
    no_instance = make_record(PLAN, Step.EVICT, id="i-3/terminate/c", instance_id="i-3")
    budget = FakeBudget(
        [
            entry("n1", live.id, "i-1"),
            entry("n2", no_node.id, "i-2"),
            entry("n3", no_instance.id, "i-3"),
            entry("n4", "i-4/terminate/d", "i-4"),
        ],
        wake=("i-9/terminate/w",),
    )
    records, queues = InMemoryRecords(), RecordingQueues()
    records.create(make_record(PLAN, Step.ACQUIRE_SLOT, id="i-9/terminate/w", slot_waiting_since=T0))
    records.create(no_node)
    alive = AliveInstances({"i-1", "i-2"})

    part = StaleBudgetEntries(
        budget=budget,
        records=records,
        node_names=lambda: {"n1", "n3", "n4"},
        alive_instances=alive,
        waker=Dispatcher(records=records, queues=queues, clock=FakeClock(), metrics=FakeMetrics()),
    )

    # When the sweeper judges them
    counts = part([live, no_node, no_instance], T0, AMPLE)

    # Then the live holder stays, and so does the one whose node is gone (its record, read again, open), the
    # entries' instances were checked in one batch, and the eligible waiter is woken
    assert budget.judged == {"n1": False, "n2": False, "n3": True, "n4": True}
    assert alive.asked == [{"i-1", "i-2", "i-3", "i-4"}]
    assert counts["SweptHolders"] == 2
    assert [s.message.record_id for s in queues.take()] == ["i-9/terminate/w"]


def test_a_waiter_that_cannot_be_woken_does_not_keep_the_others_waiting() -> None:
    # Given a sweep that frees two slots, each for a waiter, the first of whose wake-up messages SQS refuses
    records, queues = InMemoryRecords(), RecordingQueues()
    for waiter in ("i-8/terminate/v", "i-9/terminate/w"):
        records.create(make_record(PLAN, Step.ACQUIRE_SLOT, id=waiter, slot_waiting_since=T0))
    original = queues.send

    def send(worker: object, message: WorkMessage, delay_seconds: int = 0) -> None:
        if message.record_id == "i-8/terminate/v":
            raise TransientError("sending to the drain queue: throttled")
        original(worker, message, delay_seconds)  # type: ignore[arg-type]

    queues.send = send  # type: ignore[method-assign]
    part = StaleBudgetEntries(
        budget=FakeBudget([], wake=("i-8/terminate/v", "i-9/terminate/w")),
        records=records,
        node_names=set,
        alive_instances=AliveInstances(set()),
        waker=Dispatcher(records=records, queues=queues, clock=FakeClock(), metrics=FakeMetrics()),
    )

    # When the sweep wakes them, Then the sweep fails, but only after the second waiter was woken (the first
    # one still has its own backoff message)
    with pytest.raises(SweepFailed, match="1 waiters"):
        part([], T0, AMPLE)
    assert [s.message.record_id for s in queues.take()] == ["i-9/terminate/w"]


@dataclass
class FakeNodes:
    """The nodes as the API server keeps them (tests/contracts/test_sweep_nodes.py): a release is a patch
    conditional on the node and its annotations as they were read (CONFLICT when they changed since, not when
    only its resourceVersion moved; GONE when it was deleted), which takes the annotations off and moves the
    resourceVersion on."""

    nodes: list[NodeInfo]
    released: list[str] = field(default_factory=list)

    def nodes_owned_by(self, owner: str) -> list[NodeInfo]:
        return [node for node in self.nodes if node.owner == owner]

    def node_names(self) -> set[str]:
        return {node.name for node in self.nodes}

    def release_node(self, node: NodeInfo, *, uncordon: bool = False) -> Claim:
        stored = next((n for n in self.nodes if n.name == node.name), None)
        if stored is None:
            return Claim.GONE
        if (stored.uid, stored.owner, stored.in_progress) != (node.uid, node.owner, node.in_progress):
            return Claim.CONFLICT
        self.released.append(node.name)
        released = {"owner": None, "in_progress": None}
        self._replace(
            stored.model_copy(update={**released, **({"unschedulable": False} if uncordon else {})})
        )
        return Claim.CLAIMED

    def touch(self, name: str) -> None:
        """Someone else changes the node: its resourceVersion moves on."""
        self._replace(next(n for n in self.nodes if n.name == name))

    def _replace(self, node: NodeInfo) -> None:
        moved = node.model_copy(update={"resource_version": str(int(node.resource_version or "0") + 1)})
        self.nodes = [moved if n.name == node.name else n for n in self.nodes]


def annotated(name: str, owner: str, instance: str, token: str) -> NodeInfo:
    progress = json.dumps({"instance": instance, "transition": "terminate", "token": token, "started": "x"})
    return NodeInfo(
        name=name,
        instance_id=instance,
        zone="a",
        ready=True,
        owner=owner,
        in_progress=progress,
        resource_version="1",
    )


def test_annotations_of_lifecycles_that_are_over_are_cleared_and_no_others() -> None:
    running = make_record(PLAN, Step.EVICT, id="i-0aaaaaaaaaaaaaaa1/terminate/t1")
    nodes = FakeNodes(
        [
            annotated("busy", "stack-a", "i-0aaaaaaaaaaaaaaa1", "t1"),  # its lifecycle is open
            annotated("over", "stack-a", "i-0aaaaaaaaaaaaaaa2", "t2"),  # its lifecycle is over
            annotated("theirs", "stack-b", "i-0aaaaaaaaaaaaaaa3", "t3"),  # another owner's
        ]
    )
    metrics = FakeMetrics()
    counts = LeftoverAnnotations(owner="stack-a", cluster=nodes, records=InMemoryRecords(), metrics=metrics)(
        [running], T0, AMPLE
    )
    assert nodes.released == ["over"]
    assert counts == {"AnnotationsCleared": 1}
    assert metrics.counts["AnnotationsCleared"] == 1


def test_a_lifecycle_that_started_after_the_sweeps_snapshot_keeps_its_slot_and_annotations() -> None:
    # Given a drain whose record was written after the sweep listed the open lifecycles
    late = make_record(
        PLAN, Step.EVICT, id="i-0aaaaaaaaaaaaaaa5/terminate/t5", instance_id="i-0aaaaaaaaaaaaaaa5"
    )
    records = InMemoryRecords()
    records.create(late)
    budget = FakeBudget([entry("n5", late.id, late.instance_id)])
    nodes = FakeNodes([annotated("n5", "stack-a", late.instance_id, "t5")])
    waker = Dispatcher(records=records, queues=RecordingQueues(), clock=FakeClock(), metrics=FakeMetrics())

    # When the sweep judges its budget entry and its node against the (older) snapshot: none open; EC2 says
    # the instance is alive when asked about it (and only then)
    StaleBudgetEntries(
        budget=budget,
        records=records,
        node_names=lambda: {"n5"},
        alive_instances=AliveInstances({late.instance_id}),
        waker=waker,
    )([], T0, AMPLE)
    LeftoverAnnotations(owner="stack-a", cluster=nodes, records=records, metrics=FakeMetrics())([], T0, AMPLE)

    # Then a consistent read of the record keeps both
    assert budget.judged == {"n5": False}
    assert nodes.released == []


def test_one_lifecycle_that_cannot_be_repaired_does_not_stop_the_others() -> None:
    # Given two lost lifecycles, the first of which fails to be resent
    repair = Repair()
    broken = make_record(PLAN, Step.EVICT, id="i-1/terminate/a")
    fine = make_record(PLAN, Step.EVICT, id="i-2/terminate/b")
    for record in (broken, fine):
        repair.records.create(record)
    repair.clock.advance(GRACE.total_seconds() + 1)
    original = repair.queues.send

    def send(worker: object, message: WorkMessage, delay_seconds: int = 0) -> None:
        if message.record_id == broken.id:
            raise ConnectionError("queue unreachable")
        original(worker, message, delay_seconds)  # type: ignore[arg-type]

    repair.queues.send = send  # type: ignore[method-assign]

    # When the sweeper repairs them, the failure is reported after the other one was resent
    with pytest.raises(SweepFailed, match="1 lifecycles could not be repaired"):
        repair.run()
    assert [s.message.record_id for s in repair.queues.sent] == [fine.id]


def test_a_failing_part_does_not_stop_the_others_and_fails_the_sweep() -> None:
    ran: list[str] = []

    def broken(open_records: Sequence[LifecycleRecord], now: datetime, time: SweepTime) -> Counts:
        raise ConnectionError("cluster unreachable")

    def fine(open_records: Sequence[LifecycleRecord], now: datetime, time: SweepTime) -> Counts:
        ran.append("fine")
        return {"Fine": 1}

    sweeper = Sweeper(
        owner="stack-a",
        records=InMemoryRecords(),
        clock=FakeClock(),
        metrics=FakeMetrics(),
        parts={"broken": broken, "fine": fine},
        shares={},
    )
    with pytest.raises(SweepFailed, match="broken"):
        sweeper.sweep(time_left=lambda: 300)
    assert ran == ["fine"]


class Killed(BaseException):
    """The Lambda runtime ending an invocation at its timeout: nothing in the function catches it."""


@contextlib.contextmanager
def killed_at_its_completion(autoscaling: FakeAutoscaling) -> Iterator[None]:
    """The invocation run within ends at its CompleteLifecycleAction call (its claim written, Auto Scaling not
    reached); Auto Scaling answers again after it."""
    complete = autoscaling.complete

    def killed(action: ActionRef, result: ActionResult) -> bool:
        raise Killed

    autoscaling.complete = killed  # type: ignore[method-assign]
    try:
        with contextlib.suppress(Killed):
            yield
    finally:
        autoscaling.complete = complete  # type: ignore[method-assign]


def test_sweeps_cut_short_by_their_timeout_keep_every_stalled_action_alive_most_urgent_first() -> None:
    # Given a stalled queue and two open actions under hooks of 900 s, both to be heartbeated before the next
    # sweep: the one the index lists first (due first) was heartbeated 300 s ago, the other 850 s ago (it
    # expires in 50 s); and sweeps so slowed down (Auto Scaling throttled) that each runs out of time after
    # one heartbeat
    repair = Repair()
    repair.autoscaling.action_timeout = 900
    now = T0 + timedelta(hours=1)
    repair.clock.current = now
    lifecycles = []
    for token, due, renewed in (
        ("a", now - timedelta(minutes=10), 300),
        ("b", now - timedelta(minutes=5), 850),
    ):
        repair.autoscaling.issue(token, f"i-{token}")
        record = make_record(
            PLAN,
            Step.EVICT,
            id=f"i-{token}/terminate/{token}",
            instance_id=f"i-{token}",
            token=token,
            node=f"n-{token}",
            due_at=due,
            heartbeat_timeout=900,
            global_deadline=global_deadline(T0, 900),
        )
        record = kept_alive(repair.autoscaling, record, now - timedelta(seconds=renewed))
        repair.records.create(record)
        lifecycles.append(record)
    heartbeat = repair.autoscaling.heartbeat

    def until_the_timeout(action: ActionRef) -> bool:
        if calls.pop() == "timeout":
            raise Killed
        return heartbeat(action)

    repair.autoscaling.heartbeat = until_the_timeout  # type: ignore[method-assign]

    # When four sweeps run, INTERVAL apart, each killed at its second heartbeat
    for _ in range(4):
        calls = ["timeout", "heartbeat"]
        with contextlib.suppress(Killed):
            repair.run()
        repair.clock.advance(INTERVAL.total_seconds())

    # Then no action timed out between them: each sweep heartbeated the one that would expire first, and the
    # one it did not reach was the most urgent of the next
    for record in lifecycles:
        assert repair.autoscaling.expires_at(record.token) > repair.clock.now(), record.token


def test_a_budget_entry_whose_node_is_gone_is_kept_when_its_lifecycle_cannot_be_read_again() -> None:
    # Given a holder of an open lifecycle whose node is missing (deleted while its instance runs: its drain may
    # still evict the pods bound to its name), and DynamoDB that will not read its record again
    record = make_record(PLAN, Step.EVICT, id="i-1/terminate/a", instance_id="i-1")
    budget = FakeBudget([entry("n1", record.id, "i-1")])
    records = InMemoryRecords()
    records.create(record)

    def throttled(record_id: str) -> LifecycleRecord | None:
        raise TransientError("reading a lifecycle record: ProvisionedThroughputExceededException")

    records.get = throttled  # type: ignore[method-assign]
    part = StaleBudgetEntries(
        budget=budget,
        records=records,
        node_names=set,
        alive_instances=AliveInstances({"i-1"}),
        waker=Dispatcher(records=records, queues=RecordingQueues(), clock=FakeClock(), metrics=FakeMetrics()),
    )

    # When the sweeper judges it, Then it is kept (its node gone is no drain over), and the part fails saying so
    with pytest.raises(SweepFailed, match="1 budget entries"):
        part([record], T0, AMPLE)
    assert budget.judged == {"n1": False}


def test_a_budget_entry_whose_lifecycle_cannot_be_read_does_not_keep_the_other_stale_entries() -> None:
    # Given three holders not in the sweep's list of open lifecycles: one whose record DynamoDB will not
    # read (throttled past the client's retries), one whose lifecycle is over, and one whose node is gone with its
    # record (expired from the table: its lifecycle long over)
    records = InMemoryRecords()
    records.create(make_record(PLAN, Step.DONE, id="i-2/terminate/b", instance_id="i-2"))
    budget = FakeBudget(
        [
            entry("n1", "i-1/terminate/a", "i-1"),
            entry("n2", "i-2/terminate/b", "i-2"),
            entry("n3", "i-3/terminate/c", "i-3"),
        ]
    )
    get = records.get

    def throttled(record_id: str) -> LifecycleRecord | None:
        if record_id == "i-1/terminate/a":
            raise TransientError("reading a lifecycle record: ProvisionedThroughputExceededException")
        return get(record_id)

    records.get = throttled  # type: ignore[method-assign]
    part = StaleBudgetEntries(
        budget=budget,
        records=records,
        node_names=lambda: {"n1", "n2"},
        alive_instances=AliveInstances({"i-1", "i-2", "i-3"}),
        waker=Dispatcher(records=records, queues=RecordingQueues(), clock=FakeClock(), metrics=FakeMetrics()),
    )

    # When the sweeper judges them, Then the other two are removed, the unreadable one is kept (its lifecycle
    # may be live), and the part fails once the budget is swept
    with pytest.raises(SweepFailed, match="1 budget entries"):
        part([], T0, AMPLE)
    assert budget.judged == {"n1": False, "n2": True, "n3": True}


def test_a_sweep_short_of_time_keeps_the_orphaned_actions_alive_and_ends_before_the_runtime_ends_it() -> None:
    # Given a stalled queue with ten open actions whose heartbeats fall due before the next sweep, an action
    # of this stack's hook held with no record (its event was lost) that expires in 50 s, and Auto Scaling so
    # throttled that each heartbeat takes 40 s: the ten alone would take the sweeper's whole 300 s
    records = InMemoryRecords()
    world = World(records=records)
    repair = Repair(clock=world.clock, records=records, autoscaling=world.autoscaling, metrics=world.metrics)
    stalled = []
    for n in range(10):
        token = f"t{n}"
        world.autoscaling.issue(token, f"i-{n}")
        record = make_record(
            PLAN, Step.EVICT, id=f"i-{n}/terminate/{token}", instance_id=f"i-{n}", token=token, node=f"n{n}"
        )
        world.records.create(record)
        stalled.append(record)
    start = stalled[0].heartbeat_deadline - MARGIN
    world.clock.current = start - timedelta(seconds=850)
    world.terminating()  # (its hook's heartbeat timeout: 900 s)
    world.clock.current = start
    heartbeat = world.autoscaling.heartbeat

    def throttled(action: ActionRef) -> bool:
        world.clock.advance(40)
        if world.clock.now() - start > timedelta(seconds=300):
            raise Killed  # the runtime ends the invocation at its timeout
        return heartbeat(action)

    world.autoscaling.heartbeat = throttled  # type: ignore[method-assign]
    sweeper = Sweeper(
        owner="stack-a",
        records=world.records,
        clock=world.clock,
        metrics=world.metrics,
        parts={"orphans": world.part.keep_alive, "lifecycles": repair.part(), "adoptions": world.part.adopt},
        shares={"lifecycles": LIFECYCLES_SHARE},
    )

    # When the sweep runs within its 300 s
    with pytest.raises(SweepFailed, match="want of time: lifecycles"):
        sweeper.sweep(time_left=lambda: 300 - (world.clock.now() - start).total_seconds())

    # Then the orphaned action (which nothing else keeps alive) lives past the next sweep, and the sweep ends
    # on its own, with a reserve left and the most urgent lifecycles kept alive, and says it was cut short
    # (before: the lifecycles took the whole 300 s, the runtime ended the sweep, and the orphan expired)
    assert world.autoscaling.expires_at(TOKEN) > start + INTERVAL
    assert world.metrics.counts["SweepsCutShort"] == 1
    repaired = {action.token for action in world.autoscaling.heartbeats if action.token_known}
    assert 0 < len(repaired) < len(stalled)


def test_sweeps_the_lifecycles_use_up_still_reach_the_budget_annotations_and_addresses() -> None:
    # Given the sweeper's parts, in the wiring's order and with its shares of time, and a lifecycle repair
    # with more work than a sweep has time for (each heartbeat throttled for 10 s, more actions than fit)
    clock = FakeClock()
    began = clock.now()
    ran: list[str] = []

    def greedy(open_records: Sequence[LifecycleRecord], now: datetime, time: SweepTime) -> Counts:
        ran.append("lifecycles")
        while True:
            if not time.enough():
                raise time.cut_short("actions left")
            clock.advance(10)

    def part(name: str) -> SweepPart:
        def run(open_records: Sequence[LifecycleRecord], now: datetime, time: SweepTime) -> Counts:
            ran.append(name)
            clock.advance(5)
            return {}

        return run

    names = ("orphans", "lifecycles", "adoptions", "budget", "annotations", "addresses")
    sweeper = Sweeper(
        owner="stack-a",
        records=InMemoryRecords(),
        clock=clock,
        metrics=FakeMetrics(),
        parts={name: greedy if name == "lifecycles" else part(name) for name in names},
        shares=SHARES,
    )

    # When it sweeps within its 300 s, cut short by the lifecycles
    with pytest.raises(SweepFailed, match="want of time: lifecycles"):
        sweeper.sweep(time_left=lambda: 300 - (clock.now() - began).total_seconds())

    # Then every part after them ran too (before: the lifecycles used the time down to the reserve, and the
    # parts after them were "not started" at every such sweep: dangling addresses never released)
    assert ran == list(names)


def test_a_completion_the_engine_is_committing_while_the_sweep_heartbeats_its_action_keeps_its_result() -> (
    None
):
    # Given a drain at its completion, its message delivered on time (due now, not overdue), and its action's
    # heartbeat deadline before the next sweep
    repair = Repair()
    record = make_record(PLAN, Step.COMPLETE, node="n1", seq=7, verified_at=T0)
    repair.clock.current = record.heartbeat_deadline - MARGIN
    record = record.model_copy(update={"due_at": repair.clock.now(), "updated_at": repair.clock.now()})
    repair.records.create(kept_alive(repair.autoscaling, record, repair.clock.now() - timedelta(seconds=10)))
    complete = repair.autoscaling.complete

    def sweep_between_the_completion_and_its_commit(action: ActionRef, result: ActionResult) -> bool:
        done = complete(action, result)
        repair.run()  # the scheduled sweep, between Auto Scaling's answer and the engine's commit
        return done

    repair.autoscaling.complete = sweep_between_the_completion_and_its_commit  # type: ignore[method-assign]
    engine = EngineWorld(
        clock=repair.clock, records=repair.records, queues=repair.queues, autoscaling=repair.autoscaling
    ).engine(
        {
            Step.COMPLETE: CompleteAction(repair.autoscaling, repair.metrics, repair.records),
            Step.CLEANUP: Script([Outcome.wait(5)]),
        }
    )

    # When the engine completes the action, and the sweep heartbeats it (refused: completed) before the
    # engine's commit lands
    engine.handle(WorkMessage(record_id=record.id, seq=7, step=Step.COMPLETE))

    # Then the lifecycle goes on as completed by nodecycle, with its result: not as an action that expired
    # undrained (the sweep's write won over the engine's commit: outcome action-expired, no completion time,
    # LifecycleActionsExpired counted, the node told its action was gone)
    moved = repair.records.get(record.id)
    assert moved is not None
    assert (moved.step, moved.outcome, moved.result) == (Step.CLEANUP, "completed", ActionResult.CONTINUE)
    assert moved.completed_at is not None
    assert repair.metrics.counts.get("LifecycleActionsExpired", 0) == 0
