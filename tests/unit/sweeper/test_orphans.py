"""The sweep of orphaned actions with in-memory ports: an action of this stack's hooks that no record tells of
is kept alive when first found and adopted through intake's path when found again; a late event of it then
starts no second lifecycle. What is not this stack's, or has a lifecycle, is left alone."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import chain, repeat

import pytest

from nodecycle.domain.catalog import LifecycleHooks, ManagedGroups
from nodecycle.domain.errors import TransientError
from nodecycle.domain.intake import Intake, IntakeOutcome
from nodecycle.domain.model import (
    WARM_POOL,
    ActionRef,
    LifecycleEvent,
    LifecycleRecord,
    Step,
    Transition,
    adopted_token,
)
from nodecycle.domain.policy import ActionResult, PlanPolicy
from nodecycle.domain.ports.lifecycle import ClaimingRecordStore, Hook, WaitingInstance
from nodecycle.domain.sweep.orphans import OrphanedActions
from nodecycle.domain.sweep.sweep_time import OutOfTime, SweepTime
from nodecycle.domain.sweep.sweeper import SweepFailed
from tests.support.fakes import T0, FakeAutoscaling, FakeClock, FakeMetrics, InMemoryRecords, RecordingQueues

OWNER, GROUP, HOOK = "stack-a", "nodes", "nodecycle-terminate"
INSTANCE, TOKEN = "i-0123456789abcdef0", "7b4c5d2e-1f3a-4b6c-8d9e-0a1b2c3d4e5f"
INTERVAL = timedelta(minutes=5)
ADOPT_AFTER = INTERVAL / 2
AMPLE = SweepTime(lambda: 300, timedelta())  # a part's time when the test is not about it


@dataclass
class World:
    clock: FakeClock = field(default_factory=FakeClock)
    records: ClaimingRecordStore = field(
        default_factory=InMemoryRecords
    )  # (the functions tests give DynamoDB's)
    queues: RecordingQueues = field(default_factory=RecordingQueues)
    metrics: FakeMetrics = field(default_factory=FakeMetrics)
    autoscaling: FakeAutoscaling = field(default_factory=FakeAutoscaling)

    def __post_init__(self) -> None:
        self.autoscaling.clock = self.clock
        self.autoscaling.action_timeout = 900
        self.autoscaling.hooks = {
            (GROUP, HOOK): Hook(Transition.TERMINATING, heartbeat_timeout=900),
            (GROUP, "nodecycle-launch"): Hook(Transition.LAUNCHING, heartbeat_timeout=900),
            (GROUP, "other-tool"): Hook(Transition.TERMINATING, heartbeat_timeout=900),
        }
        self.intake = Intake(
            owner=OWNER,
            plan=PlanPolicy(kubernetes=True, eip=False, readiness_gate=True),
            records=self.records,
            queues=self.queues,
            groups=self.groups(),
            hooks=LifecycleHooks(self.autoscaling, self.clock),
            autoscaling=self.autoscaling,
            clock=self.clock,
            metrics=self.metrics,
            resume_grace=timedelta(seconds=60),
            retry_window=timedelta(seconds=210),
        )
        self.part = OrphanedActions(
            groups=self.groups(),
            hooks=LifecycleHooks(self.autoscaling, self.clock),
            autoscaling=self.autoscaling,
            intake=self.intake,
            records=self.records,
            metrics=self.metrics,
            adopt_after=ADOPT_AFTER,
        )

    def groups(self) -> ManagedGroups:
        return ManagedGroups(
            owner=OWNER,
            names=(GROUP,),
            by_tag=True,
            hooks=(HOOK, "nodecycle-launch"),
            autoscaling=self.autoscaling,
            clock=self.clock,
        )

    def terminating(
        self,
        instance: str = INSTANCE,
        group: str = GROUP,
        tags: dict[str, str] | None = None,
        token: str = TOKEN,
    ) -> None:
        """Auto Scaling starts the terminate action of ``instance`` under ``HOOK`` (token ``TOKEN``)."""
        self.autoscaling.issue(token, instance, at=self.clock.now(), hook=(group, HOOK))
        self.autoscaling.waiting.append(WaitingInstance(group, tags or {}, instance, Transition.TERMINATING))

    def sweep(self) -> dict[str, int]:
        """The orphans' two parts of a sweep: the keep-alive, then (after the lifecycles') the adoptions."""
        open_records, now = list(self.records.open_records(OWNER)), self.clock.now()
        return self.part.keep_alive(open_records, now, AMPLE) | self.part.adopt(open_records, now, AMPLE)

    def event(self, token: str = TOKEN, started_at: datetime = T0) -> LifecycleEvent:
        """The action's own event, as intake gets it (late)."""
        return LifecycleEvent(
            group=GROUP,
            hook=HOOK,
            instance_id=INSTANCE,
            token=token,
            transition=Transition.TERMINATING,
            started_at=started_at,
            delivery="eventbridge",
        )


def adopted(world: World) -> LifecycleRecord | None:
    return world.records.get(f"{INSTANCE}/terminate/{adopted_token(HOOK)}")


def test_an_action_held_with_no_record_is_kept_alive_first_and_adopted_by_a_later_sweep() -> None:
    # Given a terminate action of this stack's hook whose event never became a record
    world = World()
    world.terminating()

    # When the sweeper first finds it
    first = world.sweep()

    # Then it is kept alive by instance id (no API tells its token), and nothing is adopted yet: intake may
    # still be retrying its event
    assert (first["LifecyclesOrphaned"], first["LifecyclesAdopted"]) == (1, 0)
    assert [(h.instance_id, h.hook, h.token_known) for h in world.autoscaling.heartbeats] == [
        (INSTANCE, HOOK, False)
    ]
    assert adopted(world) is None
    assert world.queues.sent == []

    # When the next sweep finds it held still
    world.clock.advance(INTERVAL.total_seconds())
    second = world.sweep()

    # Then its lifecycle starts as intake would start it: the record, and its first step on the drain queue
    assert second["LifecyclesAdopted"] == 1
    record = adopted(world)
    assert record is not None
    assert (record.step, record.owner, record.hook, record.token_known) == (
        Step.ACQUIRE_SLOT,
        OWNER,
        HOOK,
        False,
    )
    assert record.started_at <= T0  # its global timeout is reckoned from no later than the action started
    assert [s.message.record_id for s in world.queues.sent] == [record.id]
    assert world.metrics.counts["LifecyclesAdopted"] == 1

    # When a later sweep runs, Then the adopted lifecycle is known: nothing is adopted again
    world.clock.advance(INTERVAL.total_seconds())
    assert world.sweep()["LifecyclesAdopted"] == 0
    assert len(world.queues.sent) == 1


def test_a_late_event_of_an_adopted_action_starts_no_second_lifecycle() -> None:
    # Given an action the sweeper adopted
    world = World()
    world.terminating()
    world.sweep()
    world.clock.advance(INTERVAL.total_seconds())
    world.sweep()
    world.queues.take()

    # When its own event comes late (redriven from the intake dead-letter queue)
    outcome = world.intake.accept(world.event())

    # Then nothing is written or sent for it
    assert outcome is IntakeOutcome.ADOPTED
    assert world.records.get(world.event().record_id) is None
    assert world.queues.sent == []


def test_an_event_that_comes_before_the_adoption_leaves_nothing_to_adopt() -> None:
    # Given an action first found with no record, whose event intake then accepts (its retry succeeded)
    world = World()
    world.terminating()
    world.sweep()
    world.clock.advance(60)
    assert world.intake.accept(world.event()) is IntakeOutcome.ACCEPTED

    # When the next sweep runs
    world.clock.advance(INTERVAL.total_seconds())
    report = world.sweep()

    # Then the action has its lifecycle: it is not adopted
    assert (report["LifecyclesOrphaned"], report["LifecyclesAdopted"]) == (0, 0)
    assert adopted(world) is None


def test_what_is_not_this_stacks_or_no_hook_of_it_holds_is_left_alone() -> None:
    # Given an instance of a group tagged for another stack, and one of ours whose action under this stack's
    # hook is over (only another tool's hook holds it)
    world = World()
    world.autoscaling.waiting.append(
        WaitingInstance(
            "theirs", {"nodecycle:owner": "stack-b"}, "i-0fffffffffffffff1", Transition.TERMINATING
        )
    )
    world.autoscaling.waiting.append(WaitingInstance(GROUP, {}, INSTANCE, Transition.TERMINATING))

    # When two sweeps run
    world.sweep()
    world.clock.advance(INTERVAL.total_seconds())
    report = world.sweep()

    # Then nothing is adopted, and the listing was one call per sweep for every group of the stack
    assert (report["LifecyclesOrphaned"], report["LifecyclesAdopted"]) == (0, 0)
    assert list(world.records.open_records(OWNER)) == []
    assert world.autoscaling.listings == [((GROUP,), OWNER)] * 2


def test_actions_of_a_warm_pools_own_moves_are_adopted_with_the_plan_their_events_would_have() -> None:
    # Given an instance launching into its warm pool and another terminating from it (Warmed:Pending:Wait,
    # Warmed:Terminating:Wait), held by this stack's hooks, whose events were lost
    world = World()
    launching, leaving = "i-0aaaaaaaaaaaaaaa1", "i-0aaaaaaaaaaaaaaa2"
    world.autoscaling.issue("launch-token", launching, at=T0, hook=(GROUP, "nodecycle-launch"))
    world.autoscaling.issue("terminate-token", leaving, at=T0, hook=(GROUP, HOOK))
    world.autoscaling.waiting += [
        WaitingInstance(GROUP, {}, launching, Transition.LAUNCHING, destination=WARM_POOL),
        WaitingInstance(GROUP, {}, leaving, Transition.TERMINATING, origin=WARM_POOL, destination="EC2"),
    ]

    # When two sweeps find them
    world.sweep()
    world.clock.advance(INTERVAL.total_seconds())
    report = world.sweep()

    # Then both are adopted as their events would have started them: the launch into the pool completed at
    # once (no readiness gate: the instance is stopped in the pool), the termination from it without a drain
    assert report["LifecyclesAdopted"] == 2
    launch = world.records.get(f"{launching}/launch/{adopted_token('nodecycle-launch')}")
    terminate = world.records.get(f"{leaving}/terminate/{adopted_token(HOOK)}")
    assert launch is not None
    assert terminate is not None
    assert (launch.plan, launch.destination) == ((Step.COMPLETE, Step.DONE), WARM_POOL)
    assert (terminate.plan, terminate.origin) == ((Step.COMPLETE, Step.DONE), WARM_POOL)


def test_an_instance_scaled_in_to_its_warm_pool_is_adopted_as_a_drain_under_the_terminating_hook() -> None:
    # Given an instance scaled in to a warm pool that takes instances back (ReuseOnScaleIn): it waits in
    # Warmed:Pending:Wait under this stack's terminating hook, listed as both moves that state may be
    world = World()
    world.autoscaling.issue(TOKEN, INSTANCE, at=T0, hook=(GROUP, HOOK))
    world.autoscaling.waiting += [
        WaitingInstance(GROUP, {}, INSTANCE, Transition.LAUNCHING, destination=WARM_POOL),
        WaitingInstance(
            GROUP, {}, INSTANCE, Transition.TERMINATING, origin="AutoScalingGroup", destination=WARM_POOL
        ),
    ]

    # When two sweeps find it
    world.sweep()
    world.clock.advance(INTERVAL.total_seconds())
    report = world.sweep()

    # Then only the hook that holds it is adopted, as the drain its event would have started: its pods are
    # evicted before the instance is stopped in the pool
    assert report["LifecyclesAdopted"] == 1
    record = adopted(world)
    assert record is not None
    assert record.plan[:3] == (Step.ACQUIRE_SLOT, Step.CORDON, Step.EVICT)
    assert record.destination == WARM_POOL
    assert world.records.get(f"{INSTANCE}/launch/{adopted_token('nodecycle-launch')}") is None


def test_an_action_is_adopted_while_an_earlier_lifecycle_of_its_instance_still_watches_the_node() -> None:
    # Given a termination into the warm pool whose lifecycle completed its action and still watches the node
    # (its cleanup lifts the cordon once the instance leaves the pool: for weeks, maybe)
    world = World()
    world.terminating()
    assert world.intake.accept(world.event().model_copy(update={"destination": WARM_POOL})) is (
        IntakeOutcome.ACCEPTED
    )
    record = world.records.get(world.event().record_id)
    assert record is not None
    assert world.autoscaling.complete(record.action, ActionResult.CONTINUE)
    watching = record.model_copy(
        update={
            "step": Step.CLEANUP,
            "seq": 1,
            "completed_at": world.clock.now(),
            "result": ActionResult.CONTINUE,
        }
    )
    assert world.records.commit(watching, record.seq)
    world.autoscaling.waiting.clear()

    # When, days later, the instance is terminated from the pool (Warmed:Terminating:Wait) and the event of that
    # action is lost
    world.clock.advance(3 * 86400)
    world.autoscaling.issue("from-the-pool", INSTANCE, at=world.clock.now(), hook=(GROUP, HOOK))
    world.autoscaling.waiting.append(
        WaitingInstance(GROUP, {}, INSTANCE, Transition.TERMINATING, origin=WARM_POOL, destination="EC2")
    )
    first = world.sweep()
    world.clock.advance(INTERVAL.total_seconds())
    second = world.sweep()

    # Then the sweeper keeps it alive and adopts it: the open lifecycle's action is over, so is not this one
    assert (first["LifecyclesOrphaned"], second["LifecyclesAdopted"]) == (1, 1)
    assert adopted(world) is not None


def test_a_sweep_short_of_time_keeps_every_orphan_alive_before_adopting_any() -> None:
    # Given two actions held with no record, found by the last sweep (both due for adoption), and a sweep with
    # time for two more items only (Auto Scaling throttled)
    world = World()
    world.terminating()
    world.terminating(instance="i-0fedcba9876543210", token="other-token")
    world.sweep()
    world.clock.advance(INTERVAL.total_seconds())
    heartbeats_before = len(world.autoscaling.heartbeats)
    calls = [300.0, 300.0]
    short = SweepTime(lambda: calls.pop() if calls else 0.0, timedelta(seconds=45))
    open_records, now = list(world.records.open_records(OWNER)), world.clock.now()

    # When its orphans' keep-alive runs, then (after the lifecycles') its adoptions
    kept = world.part.keep_alive(open_records, now, short)
    with pytest.raises(OutOfTime):
        world.part.adopt(open_records, now, short)

    # Then both actions got their heartbeat (not one heartbeat and one adoption, the other left to expire),
    # and the adoptions it had no time for are the next sweep's
    assert kept["LifecyclesOrphaned"] == 2
    assert len(world.autoscaling.heartbeats) - heartbeats_before == 2
    assert world.queues.sent == []


def test_the_adoptions_take_only_what_their_own_sweep_kept_alive() -> None:
    # Given an action held with no record, kept alive by two sweeps, the second too short of time to adopt it
    world = World()
    world.terminating()
    world.sweep()
    world.clock.advance(INTERVAL.total_seconds())
    now = world.clock.now()
    world.part.keep_alive([], now, AMPLE)

    # When the next sweep has no time for the keep-alive (the action since completed elsewhere, say), but
    # has for the adoptions
    world.clock.advance(INTERVAL.total_seconds())
    report = world.part.adopt([], world.clock.now(), AMPLE)

    # Then it adopts nothing: no heartbeat of its own told it the action is still held
    assert report["LifecyclesAdopted"] == 0
    assert adopted(world) is None


def test_sweeps_cut_short_reach_every_orphan_in_turn_not_the_same_first_ones_again() -> None:
    # Given four actions held with no record, and sweeps (Auto Scaling throttled) each with time to look at
    # two held instances only
    world = World()
    instances = [f"i-0000000000000000{n}" for n in range(4)]
    for n, instance in enumerate(instances):
        world.terminating(instance=instance, token=f"token-{n}")

    # When two such sweeps run their orphans' keep-alive, an interval apart
    for _ in range(2):
        short = SweepTime(chain([300.0, 300.0], repeat(0.0)).__next__, timedelta(seconds=45))
        with pytest.raises(OutOfTime):
            world.part.keep_alive([], world.clock.now(), short)
        world.clock.advance(INTERVAL.total_seconds())

    # Then each action got a heartbeat from one of them: the second sweep begins where the first stopped
    # (before: both heartbeated the first two listed, and the other two were never kept alive, their hook's
    # timeout left to apply its default result to undrained nodes)
    assert {action.instance_id for action in world.autoscaling.heartbeats} == set(instances)


def test_a_listing_that_failed_is_not_taken_for_one_that_did_not_show_the_action() -> None:
    # Given a sweep that listed the held instances and found none, then an action of this stack's hook whose
    # event never became a record
    world = World()
    world.sweep()
    world.clock.advance(60)
    world.terminating()
    started = world.clock.now()

    # When the next sweep cannot list them (DescribeAutoScalingGroups throttled past the client's retries)
    def throttled(names: tuple[str, ...], owner: str | None) -> list[WaitingInstance]:
        raise TransientError("listing the instances lifecycle hooks hold: Throttling: Rate exceeded")

    listing = world.autoscaling.waiting_instances
    world.autoscaling.waiting_instances = throttled  # type: ignore[method-assign]
    world.clock.advance(INTERVAL.total_seconds() - 60)
    with pytest.raises(TransientError):
        world.sweep()
    world.autoscaling.waiting_instances = listing  # type: ignore[method-assign]

    # and the two sweeps after it find the action held, then adopt it
    for _ in range(2):
        world.clock.advance(INTERVAL.total_seconds())
        world.sweep()

    # Then its global timeout is reckoned from no later than the action started: from the last listing that
    # did not show it (before: from the failed one, after the action started, and the lifecycle would have
    # been settled after Auto Scaling had applied the hook's default result at the real global timeout)
    record = adopted(world)
    assert record is not None
    assert record.started_at <= started


def test_an_action_listed_but_not_looked_at_is_not_taken_for_one_the_listing_did_not_show() -> None:
    # Given a sweep that listed the held instances and found none, then an action of this stack's hook whose
    # event never became a record
    world = World()
    world.sweep()
    world.clock.advance(60)
    world.terminating()
    started = world.clock.now()

    # When the next sweep lists it but has no time left to look at it (Auto Scaling throttled), and the two
    # after it find it held, then adopt it
    world.clock.advance(INTERVAL.total_seconds() - 60)
    with pytest.raises(OutOfTime):
        world.part.keep_alive([], world.clock.now(), SweepTime(lambda: 0.0, timedelta(seconds=45)))
    for _ in range(2):
        world.clock.advance(INTERVAL.total_seconds())
        world.sweep()

    # Then its global timeout is reckoned from no later than the action started (before: from the listing
    # that showed it, taken for one that did not)
    record = adopted(world)
    assert record is not None
    assert record.started_at <= started


def test_an_action_whose_probe_failed_keeps_its_first_sighting() -> None:
    # Given a sweep that listed the held instances and found none, then an action of this stack's hook whose
    # event never became a record, found held by the next sweep
    world = World()
    world.sweep()
    world.clock.advance(60)
    world.terminating()
    started = world.clock.now()
    world.clock.advance(INTERVAL.total_seconds() - 60)
    world.sweep()

    # When the sweep after it cannot probe it (its heartbeat throttled past the client's retries), and the next
    # finds it held again
    def throttled(action: ActionRef) -> bool:
        raise TransientError("recording a lifecycle heartbeat: Throttling: Rate exceeded")

    heartbeat = world.autoscaling.heartbeat
    world.autoscaling.heartbeat = throttled  # type: ignore[method-assign]
    world.clock.advance(INTERVAL.total_seconds())
    with pytest.raises(SweepFailed):
        world.sweep()
    world.autoscaling.heartbeat = heartbeat  # type: ignore[method-assign]
    world.clock.advance(INTERVAL.total_seconds())
    report = world.sweep()

    # Then it is adopted as found two sweeps ago, its global timeout reckoned from no later than the action
    # started (not from the listing that first showed it held, taken for one that did not)
    assert report["LifecyclesAdopted"] == 1
    record = adopted(world)
    assert record is not None
    assert record.started_at <= started
