"""Intake of the events of a hook changed within the hooks' cache minute (recreated for the other transition, or
deleted and created again) while forged messages naming it come: an event its action started after the answer
here was read is retried (TransientError: the queue's redelivery) rather than dropped, and a forged one is
dropped at its next delivery at the latest, never retried for ever."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.errors import TransientError
from nodecycle.domain.intake import Intake, IntakeOutcome
from nodecycle.domain.model import LifecycleEvent, Transition
from nodecycle.domain.ports.lifecycle import Hook
from tests.support.fakes import FakeAutoscaling, FakeClock
from tests.unit.review.test_intake_invented_group_names import a_stack

OWNER, GROUP, HOOK = "stack-a", "nodes", "h"
REDELIVERY = timedelta(
    seconds=180
)  # the intake queue's visibility timeout (template.yaml): past the hooks' ttl


def told(n: int, clock: FakeClock, transition: Transition, ago: float = 0) -> LifecycleEvent:
    return LifecycleEvent(
        instance_id=f"i-{n:017x}",
        transition=transition,
        token=f"7b4c5d2e-1f3a-4b6c-8d9e-{n:012x}",
        group=GROUP,
        hook=HOOK,
        started_at=clock.now() - timedelta(seconds=ago),
        delivery="sqs",
    )


def delivered(intake: Intake, event: LifecycleEvent) -> IntakeOutcome | None:
    """What intake answers a delivery of the event: None when it is retried (sent back to the queue)."""
    try:
        return intake.accept(event)
    except TransientError:
        return None


def forged_launches(intake: Intake, clock: FakeClock, first: int, seconds: int) -> None:
    """Forged launches naming the hook, 30 a second, each dated when it is sent: dropped (or retried)."""
    for n in range(first, first + 30 * seconds):
        assert delivered(intake, told(n, clock, Transition.LAUNCHING)) in (IntakeOutcome.WRONG_HOOK, None)
        clock.advance(1 / 30)


def hook_of(transition: Transition) -> Hook:
    return Hook(transition, heartbeat_timeout=300)


def test_a_real_event_of_a_hook_recreated_for_the_other_transition_after_a_flood_is_retried_not_dropped() -> (
    None
):
    # Given a terminate hook read here, and a flood of forged launches naming it that used the fresh reads up
    autoscaling, clock = FakeAutoscaling(hooks={(GROUP, HOOK): hook_of(Transition.TERMINATING)}), FakeClock()
    intake = a_stack(autoscaling, clock, named=(GROUP,), by_tag=False)
    assert intake.accept(told(0, clock, Transition.TERMINATING)) is IntakeOutcome.ACCEPTED
    forged_launches(intake, clock, first=1, seconds=5)

    # When the hook is recreated for launches within the cache's minute, and its first launch comes before
    # a fresh read is allowed again
    autoscaling.hooks[(GROUP, HOOK)] = hook_of(Transition.LAUNCHING)
    launch = told(10_000, clock, Transition.LAUNCHING)

    # Then it is retried (before: dropped as wrong-hook), and taken in at its redelivery
    assert delivered(intake, launch) is None
    clock.advance(REDELIVERY.total_seconds())
    assert intake.accept(launch) is IntakeOutcome.ACCEPTED


def test_a_real_event_of_a_hook_deleted_and_created_again_within_the_minute_is_retried_not_dropped() -> None:
    # Given a hook deleted, and a message naming it meanwhile (its absence remembered for the cache's minute)
    autoscaling, clock = FakeAutoscaling(), FakeClock()
    intake = a_stack(autoscaling, clock, named=(GROUP,), by_tag=False)
    assert intake.accept(told(0, clock, Transition.TERMINATING)) is IntakeOutcome.UNKNOWN_HOOK

    # When the hook is created again, and its first action's event comes within the minute
    clock.advance(5)
    autoscaling.hooks[(GROUP, HOOK)] = hook_of(Transition.TERMINATING)
    clock.advance(5)
    event = told(1, clock, Transition.TERMINATING)

    # Then it is retried (before: dropped as unknown-hook), and taken in at its redelivery
    assert delivered(intake, event) is None
    clock.advance(REDELIVERY.total_seconds())
    assert intake.accept(event) is IntakeOutcome.ACCEPTED


@pytest.mark.parametrize("hook", [None, Transition.TERMINATING], ids=["unknown-hook", "wrong-hook"])
def test_forged_messages_are_dropped_at_once_or_at_their_next_delivery(hook: Transition | None) -> None:
    # Given a group with no such hook, or with a terminate hook, read here
    hooks = {} if hook is None else {(GROUP, HOOK): hook_of(hook)}
    autoscaling, clock = FakeAutoscaling(hooks=hooks), FakeClock()
    intake = a_stack(autoscaling, clock, named=(GROUP,), by_tag=False)
    transition = Transition.LAUNCHING if hook else Transition.TERMINATING
    assert intake.accept(told(0, clock, transition, ago=1)) is not IntakeOutcome.ACCEPTED

    # When forged messages come for a minute, dated when they are sent, and dated before the answer here
    clock.advance(1)
    dropped = IntakeOutcome.UNKNOWN_HOOK if hook is None else IntakeOutcome.WRONG_HOOK
    at_once, retried = set(), []
    for n in range(1, 600):
        at_once.add(delivered(intake, told(1000 + n, clock, transition, ago=3600)))
        if delivered(intake, now := told(n, clock, transition)) is None:
            retried.append(now)
        clock.advance(0.1)

    # Then those dated before the answer here are dropped at once; each of the others is dropped, or retried
    # and dropped at its next delivery (one receive more, not the dead-letter queue's five, not for ever)
    assert at_once == {dropped}
    assert retried
    clock.advance(REDELIVERY.total_seconds())
    assert {delivered(intake, event) for event in retried} == {dropped}
