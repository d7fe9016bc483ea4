"""The start an adopted action is dated from when a listed lifecycle of its instance hid it first. The keep-alive
takes an instance held under a transition some open lifecycle of it is listed for as that lifecycle's, and does
not probe it: a lifecycle taken in from a message that named the instance with another's token (its action is
another instance's), a version of a lifecycle whose action is over that a lagging index still lists, another
hook's lifecycle of the same termination. Once that lifecycle no longer hides it, the action is found held with
no record and adopted; the listings that showed the instance held while it was hidden did show it, and its
global timeout, reckoned from one of them, would come after Auto Scaling's (invariant 11) when no scaling
activity dates it."""

from __future__ import annotations

from nodecycle.domain.intake import IntakeOutcome
from nodecycle.domain.model import Step, global_deadline
from tests.unit.sweeper.test_orphans import GROUP, HOOK, INTERVAL, World, adopted

HEARTBEAT = 900  # the World's hooks' heartbeat timeout


def test_an_orphan_a_listed_lifecycle_hid_is_dated_from_before_it_was_first_shown() -> None:
    # Given a sweep that listed the held instances and found none, then the terminate action of an instance
    # whose event never became a record, and a lifecycle of that instance taken in from a message that named
    # it with another instance's token (the group lists no activity naming the instance: nothing else dates it)
    world = World()
    world.autoscaling.activity_started = lambda group, instance_id, since: None  # type: ignore[method-assign]
    world.sweep()
    world.clock.advance(60)
    world.terminating()
    started = world.clock.now()
    world.autoscaling.issue("crossed", None, at=started, hook=(GROUP, HOOK))
    assert world.intake.accept(world.event(token="crossed", started_at=started)) is IntakeOutcome.ACCEPTED
    crossed = world.records.get(world.event(token="crossed").record_id)
    assert crossed is not None

    # When two sweeps list the instance held, hidden by that lifecycle, which then ends (its token's action
    # expired), and the next two sweeps find the action held with no record and adopt it
    for sweep in range(2):
        world.clock.advance(INTERVAL.total_seconds() - (60 if sweep == 0 else 0))
        assert world.sweep()["LifecyclesOrphaned"] == 0
    ended = crossed.model_copy(
        update={"step": Step.DONE, "seq": crossed.seq + 1, "outcome": "action-expired"}
    )
    assert world.records.commit(ended, crossed.seq)
    for _ in range(2):
        world.clock.advance(INTERVAL.total_seconds())
        world.sweep()

    # Then its global timeout is reckoned from no later than the action started: from the last listing that did
    # not show the instance held (before: from the last one that showed it hidden, ten minutes late, and the
    # lifecycle's guard would settle it after Auto Scaling applied the hook's default result)
    record = adopted(world)
    assert record is not None
    assert record.started_at <= started
    assert record.global_deadline <= global_deadline(started, HEARTBEAT)
