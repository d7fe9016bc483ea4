"""How long a new group's first lifecycle action waits for intake during a flood of invented group names, when
the listing of this owner's groups (asked past the lookup bound) was read just before the group was created: its
event is retried (LIST_EVERY: the listing is read again at most every 30 s), and its redelivery, the intake
queue's visibility timeout later, takes it in. Measured on the test's clock against the shortest heartbeat
timeout the default settings accept (615 s): taken in one redelivery after its start, with a margin and a step's
redelivery left for its first step (intake renews an action that reached it with less), and none is lost."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any, cast

from nodecycle.domain.catalog import LIST_EVERY, OWNER_TAG, LifecycleHooks
from nodecycle.domain.intake import Intake, IntakeOutcome
from nodecycle.domain.model import LifecycleEvent, Transition
from nodecycle.domain.policy import PlanPolicy
from nodecycle.domain.ports.lifecycle import Hook
from nodecycle.settings import Timing
from nodecycle.wiring.intake import managed_groups
from tests.functions.intake.test_group_names_flood import (
    HOOK,
    OWNER,
    REDELIVERY,
    CountingAutoscaling,
    naming,
    offered,
    used_up,
)
from tests.support.fakes import FakeClock, FakeMetrics, InMemoryRecords, RecordingQueues

TIMING = Timing()  # the template's defaults: a margin of 60 s, the work queues' 150 s redelivery
SHORTEST_HOOK = TIMING.min_heartbeat_timeout_seconds  # 615 s


def a_stack(autoscaling: CountingAutoscaling, clock: FakeClock) -> Intake:
    """A stack managing the groups tagged for OWNER, with the default settings' retry window."""
    config = SimpleNamespace(owner_id=OWNER, managed_groups=(), managed_by_tag=True, managed_hooks=("*",))
    return Intake(
        owner=OWNER,
        plan=PlanPolicy(kubernetes=True, eip=False, readiness_gate=True),
        records=InMemoryRecords(),
        queues=RecordingQueues(),
        groups=managed_groups(
            cast(Any, config), cast(Any, SimpleNamespace(autoscaling=autoscaling, clock=clock))
        ),
        hooks=LifecycleHooks(autoscaling, clock),
        autoscaling=autoscaling,
        clock=clock,
        metrics=FakeMetrics(),
        resume_grace=timedelta(seconds=TIMING.resume_grace_seconds),
        retry_window=timedelta(seconds=TIMING.heartbeat_margin_seconds + TIMING.redelivery_seconds),
    )


def flood(intake: Intake, clock: FakeClock, n: int) -> None:
    """A moment of the flood: invented names enough to take every lookup by name the bound has let through since
    the last (a flood of 30 names a second takes each as it comes)."""
    for k in range(5):
        offered(intake, naming(f"invented-{n}-{k}", 10_000 + 5 * n + k, clock))


def flooded_and_listed() -> tuple[FakeClock, CountingAutoscaling, Intake]:
    """A tag-managed stack whose lookups a flood of invented names used up, the listing of this owner's groups
    read at the flood's next name (dropped as unmanaged)."""
    clock = FakeClock()
    autoscaling = CountingAutoscaling(clock=clock, action_timeout=SHORTEST_HOOK)
    intake = a_stack(autoscaling, clock)
    used_up(intake, clock)
    assert offered(intake, naming("invented-0", 10_000, clock)) is IntakeOutcome.UNMANAGED
    return clock, autoscaling, intake


def test_a_new_groups_first_action_during_a_flood_is_taken_in_one_redelivery_on_and_kept_alive() -> None:
    # Given a tag-managed stack whose lookups a flood of invented names used up, the listing of this owner's
    # groups read at the flood's next name (before the group below exists)
    clock, autoscaling, intake = flooded_and_listed()
    listed_at = clock.now()

    # When a group is created for the stack 2 s later (its hook's heartbeat timeout the shortest the settings
    # accept), an action of it starts 3 s after that, and its event comes a second later, the flood going on
    clock.advance(2)
    autoscaling.tags["nodes-new"] = {OWNER_TAG: OWNER}
    autoscaling.hooks[("nodes-new", HOOK)] = Hook(Transition.TERMINATING, heartbeat_timeout=SHORTEST_HOOK)
    clock.advance(3)
    ours = naming("nodes-new", 100_000, clock)
    autoscaling.issue(ours.token, ours.instance_id, at=clock.now(), hook=("nodes-new", HOOK))
    clock.advance(1)
    assert clock.now() - listed_at < LIST_EVERY
    flood(intake, clock, 0)
    deliveries = [offered(intake, ours)]
    for n in range(int(REDELIVERY.total_seconds())):  # (the listing read again every 30 s meanwhile)
        clock.advance(1)
        flood(intake, clock, n + 1)
    deliveries.append(offered(intake, ours))

    # Then its first delivery is retried and its redelivery takes it in: one visibility timeout after its start
    assert deliveries == [None, IntakeOutcome.ACCEPTED]
    waited = clock.now() - ours.started_at
    assert waited <= REDELIVERY + timedelta(seconds=2)
    print(
        f"taken in {waited.total_seconds():.0f} s after its action started (its hook's timeout {SHORTEST_HOOK} s)"
    )
    # And its action is alive with a margin and a step's redelivery ahead for its first step (intake heartbeats one
    # that has less left)
    ahead = autoscaling.expires_at(ours.token) - clock.now()
    assert ahead >= timedelta(seconds=TIMING.heartbeat_margin_seconds + TIMING.redelivery_seconds)


def test_its_event_by_eventbridge_handed_to_the_queue_is_taken_in_at_its_first_receive() -> None:
    # Given the same flood and listing, and the new group's action's event from EventBridge retried (handed to
    # the intake queue, delayed until the listing is read again: nodecycle/wiring/intake_requeue.py's requeue_delay,
    # at most LIST_EVERY)
    clock, autoscaling, intake = flooded_and_listed()
    clock.advance(2)
    autoscaling.tags["nodes-new"] = {OWNER_TAG: OWNER}
    autoscaling.hooks[("nodes-new", HOOK)] = Hook(Transition.TERMINATING, heartbeat_timeout=SHORTEST_HOOK)
    clock.advance(3)
    ours: LifecycleEvent = naming("nodes-new", 100_000, clock)
    autoscaling.issue(ours.token, ours.instance_id, at=clock.now(), hook=("nodes-new", HOOK))
    clock.advance(1)
    flood(intake, clock, 0)
    assert offered(intake, ours) is None

    # When the queue delivers it, its delay later, Then it is taken in (the listing read again since)
    clock.advance(LIST_EVERY.total_seconds())
    flood(intake, clock, 1)
    assert offered(intake, ours) is IntakeOutcome.ACCEPTED
    assert clock.now() - ours.started_at <= LIST_EVERY + timedelta(seconds=8)
