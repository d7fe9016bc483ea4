"""The engine's guard near an action's global timeout counts GlobalTimeoutsNear (a metric that pages) once per
action: a run whose commit DynamoDB refuses after the guard decided (throttled past the client's retries), its
message delivered again, decides it again; a commit that lands with its answer lost and then raises counted nothing,
and the message's delivery again is stale (the record at the seq it wrote) and dropped: no page for an action
completed at its last chance. Read back as the pages of an action found gone are (``engine.gone_counted``)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.completion import CompleteAction
from nodecycle.domain.engine import Outcome, StepEngine
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import Step
from tests.support.fakes import commit_fails_once
from tests.unit.foundation.test_engine import MARGIN, PLAN, Script, World, kept_alive, make_record


def at_the_guard() -> tuple[World, StepEngine]:
    """A lifecycle still waiting for its slot at the guard's point, and its engine."""
    world = World()
    record = make_record(PLAN)
    now = record.global_deadline - timedelta(seconds=MARGIN)
    world.records.create(kept_alive(world.autoscaling, record, now - timedelta(seconds=100)))
    engine = world.engine(
        {
            Step.ACQUIRE_SLOT: Script([Outcome.wait(30)]),
            Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics),
            Step.CLEANUP: Script([Outcome.next()]),
        }
    )
    world.clock.current = now
    return world, engine


def test_a_guard_whose_commit_is_refused_counts_its_action_near_its_global_timeout_once() -> None:
    # Given a lifecycle still waiting for its slot at the guard's point, whose first commit DynamoDB refuses
    world, engine = at_the_guard()
    commit_fails_once(world.records, TransientError("ProvisionedThroughputExceededException"))
    with pytest.raises(TransientError):
        engine.handle(world.message())

    # When its message is delivered again
    world.clock.advance(5)
    engine.handle(world.message())

    # Then the action was completed once by the guard, and counted near its global timeout once
    assert world.record().outcome == "global-timeout-near"
    assert len(world.autoscaling.completed) == 1
    assert world.metrics.counts["GlobalTimeoutsNear"] == 1


def test_a_guard_whose_commit_landed_with_its_answer_lost_counts_its_action_near_its_global_timeout_once() -> (
    None
):
    # Given a lifecycle still waiting for its slot at the guard's point, whose commit lands but raises
    world, engine = at_the_guard()
    commit_fails_once(
        world.records, TransientError("writing a lifecycle record: InternalServerError"), landed=True
    )
    message = world.message()
    with pytest.raises(TransientError):
        engine.handle(message)

    # When its message is delivered again (stale)
    world.clock.advance(5)
    engine.handle(message)

    # Then the guard's decision stands (its completion left to the sweep of due records, its message not sent),
    # counted near its global timeout once (before: never)
    assert (world.record().outcome, world.record().step) == ("global-timeout-near", Step.COMPLETE)
    assert world.metrics.counts["GlobalTimeoutsNear"] == 1
