"""Two stacks' intake of one AWS Health event (every stack gets it; each takes in its own instances of it, the
others' as not its own) writing one lifecycle table by mistake: the progress one saves when its time runs out is
not the other's, whose owner id the first's begins with ("prod", "prod-2"): the second takes in every instance
the event names, its own among those the first took in."""

from __future__ import annotations

import pytest

from nodecycle.domain.intake_budget import IntakeBudget, OutOfTime
from tests.support.fakes import FakeClock, InMemoryRecords
from tests.unit.foundation.test_intake_budget import PLENTY, Accepting, health_event


def test_one_owners_progress_through_an_event_skips_nothing_of_another_owners_intake_of_it() -> None:
    # Given one table (by mistake) for stacks "prod" and "prod-2", and a Health event of three instances, of which
    # "prod" took in two (as its own or not) before its time ran out
    records = InMemoryRecords()
    event = health_event("i-1", "i-2", "i-3")
    first = Accepting()
    with pytest.raises(OutOfTime):
        IntakeBudget(records, FakeClock(), owner="prod").take_in(
            event, first, lambda: PLENTY if len(first.taken) < 2 else 0.0
        )
    assert first.taken == ["i-1", "i-2"]

    # When "prod-2"'s intake takes the same event in
    second = Accepting()
    IntakeBudget(records, FakeClock(), owner="prod-2").take_in(event, second, lambda: PLENTY)

    # Then it takes in every instance of it; and "prod"'s retry continues where "prod" stopped
    assert second.taken == ["i-1", "i-2", "i-3"]
    again = Accepting()
    IntakeBudget(records, FakeClock(), owner="prod").take_in(event, again, lambda: PLENTY)
    assert again.taken == ["i-3"]
