"""The engine's guard near an action's global timeout counts GlobalTimeoutsNear (a metric that pages) once per
action: a run whose commit DynamoDB refuses after the guard decided (throttled past the client's retries), its
message delivered again, decides it again."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.completion import CompleteAction
from nodecycle.domain.engine import Outcome
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import LifecycleRecord, Step
from tests.unit.foundation.test_engine import MARGIN, PLAN, Script, World, kept_alive, make_record


def test_a_guard_whose_commit_is_refused_counts_its_action_near_its_global_timeout_once() -> None:
    # Given a lifecycle still waiting for its slot at the guard's point, whose first commit DynamoDB refuses
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
    commit = world.records.commit

    def refuse_once(record: LifecycleRecord, expected_seq: int) -> bool:
        world.records.commit = commit  # type: ignore[method-assign]
        raise TransientError("ProvisionedThroughputExceededException")

    world.records.commit = refuse_once  # type: ignore[method-assign]
    with pytest.raises(TransientError):
        engine.handle(world.message())

    # When its message is delivered again
    world.clock.advance(5)
    engine.handle(world.message())

    # Then the action was completed once by the guard, and counted near its global timeout once
    assert world.record().outcome == "global-timeout-near"
    assert len(world.autoscaling.completed) == 1
    assert world.metrics.counts["GlobalTimeoutsNear"] == 1
