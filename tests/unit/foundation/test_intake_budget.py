"""Intake within one invocation's time (IntakeBudget): an event's instances are started only with time left
to finish them, and an event cut short continues at its retry where it stopped."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.errors import TransientError
from nodecycle.domain.intake_budget import RESERVE, IntakeBudget, OutOfTime
from nodecycle.domain.model import DisruptionEvent, Transition
from tests.support.fakes import T0, FakeClock, InMemoryRecords

PLENTY = RESERVE.total_seconds() + 20


def health_event(*instances: str, event_id: str = "health-1") -> list[DisruptionEvent]:
    """What an AWS Health event naming ``instances`` parses to: one disruption each, in their order."""
    return [
        DisruptionEvent(
            instance_id=instance,
            cause=Transition.SCHEDULED_CHANGE,
            event_id=event_id,
            happened_at=T0,
            strikes_at=T0 + timedelta(days=3),
            delivery="eventbridge",
        )
        for instance in instances
    ]


class Accepting:
    """Takes in each disruption it is given, and fails once at ``fail_at`` (a throttled call, say)."""

    def __init__(self, fail_at: str | None = None) -> None:
        self.fail_at = fail_at
        self.taken: list[str] = []

    def __call__(self, event: DisruptionEvent) -> str:
        if event.instance_id == self.fail_at:
            self.fail_at = None
            raise TransientError("Rate exceeded")
        self.taken.append(event.instance_id)
        return "accepted"


def test_an_event_cut_short_by_an_error_continues_at_its_retry_where_it_stopped() -> None:
    # Given a Health event of five instances whose third one's intake fails once
    budget = IntakeBudget(InMemoryRecords(), FakeClock())
    event = health_event("i-1", "i-2", "i-3", "i-4", "i-5")
    accept = Accepting(fail_at="i-3")

    # When it is delivered, then delivered again
    with pytest.raises(TransientError):
        budget.take_in(event, accept, lambda: PLENTY)
    outcomes = budget.take_in(event, accept, lambda: PLENTY)

    # Then the retry takes in the three left, and not the two taken in before the error again
    assert accept.taken == ["i-1", "i-2", "i-3", "i-4", "i-5"]
    assert outcomes == ["accepted"] * 3


def test_an_event_naming_other_instances_under_the_same_id_skips_none_of_them() -> None:
    # Given the first two of three instances of a Health event taken in before its time ran out
    records = InMemoryRecords()
    budget = IntakeBudget(records, FakeClock())
    first = Accepting()
    with pytest.raises(OutOfTime):
        budget.take_in(
            health_event("i-1", "i-2", "i-3"), first, lambda: PLENTY if len(first.taken) < 2 else 0.0
        )
    assert first.taken == ["i-1", "i-2"]

    # When an event under its id names other instances (another version of it, or forged by the queue)
    accept = Accepting()
    budget.take_in(health_event("i-7", "i-8", "i-9"), accept, lambda: PLENTY)

    # Then each of them is taken in
    assert accept.taken == ["i-7", "i-8", "i-9"]


def test_an_event_of_one_instance_left_with_too_little_time_is_not_started_and_saves_nothing() -> None:
    # Given a lifecycle action's or a Spot warning's single disruption, and less time left than the reserve
    records = InMemoryRecords()
    accept = Accepting()

    # When it is taken in, it is not: it fails, for its retry, and leaves no progress behind
    with pytest.raises(OutOfTime):
        IntakeBudget(records, FakeClock()).take_in(health_event("i-1"), accept, lambda: 1.0)
    assert accept.taken == []
    assert records.progresses == {}


class Unreadable(Accepting):
    """Fails, at every delivery, for ``broken`` (its record unreadable to this release, say), for good."""

    def __init__(self, broken: str) -> None:
        super().__init__()
        self.broken = broken
        self.tried: list[str] = []

    def __call__(self, event: DisruptionEvent) -> str:
        self.tried.append(event.instance_id)
        if event.instance_id == self.broken:
            raise ValueError(f"the record of {self.broken} cannot be read")
        return super().__call__(event)


def test_an_instance_failing_for_good_holds_back_none_after_it_and_the_retry_comes_back_to_it() -> None:
    # Given a Health event of four instances, the second of which fails at every delivery, not for a retry
    records = InMemoryRecords()
    budget = IntakeBudget(records, FakeClock())
    event = health_event("i-1", "i-2", "i-3", "i-4")
    accept = Unreadable("i-2")

    # When it is delivered, Then the three others are taken in, and the event fails with the second's error
    with pytest.raises(ValueError, match="i-2 cannot be read"):
        budget.take_in(event, accept, lambda: PLENTY)
    assert accept.taken == ["i-1", "i-3", "i-4"]

    # And its retry starts at the second (not at the first, taken in; not past it, never taken in)
    accept.tried.clear()
    with pytest.raises(ValueError):
        budget.take_in(event, accept, lambda: PLENTY)
    assert accept.tried == ["i-2", "i-3", "i-4"]


def test_an_error_for_a_retry_still_stops_the_event_at_once() -> None:
    # Given a Health event of three instances whose second one is throttled
    budget = IntakeBudget(InMemoryRecords(), FakeClock())
    accept = Accepting(fail_at="i-2")

    # When it is delivered, Then it stops there (the others would be throttled too), the third left to its retry
    with pytest.raises(TransientError):
        budget.take_in(health_event("i-1", "i-2", "i-3"), accept, lambda: PLENTY)
    assert accept.taken == ["i-1"]
