"""An action found gone (``LifecycleActionsExpired``) or never had (``LifecycleActionsUnknown``) pages once: counted
when the commit that records the lifecycle moved past it lands, not before. The pages are written out as counted
(observability.PAGES): a run whose commit DynamoDB refuses (or that is killed before it) is delivered again, and
finds the action gone again; of two deliveries (or the engine and a sweep) that both found it gone, one commit
lands. Counted before the commit, each of them paged."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from nodecycle.domain.engine import Outcome, StepEngine
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.ports.lifecycle import WorkMessage
from tests.support.fakes import commit_fails_once
from tests.unit.foundation.test_engine import PLAN, Script, World, make_record
from tests.unit.sweeper.test_sweeper import MARGIN, Repair

# (the step found the action gone at: its confirmation past the heartbeat deadline; its keep-alive's heartbeat
# a margin before it; its first confirmation, of an action Auto Scaling never had)
GONE = {
    "confirmation": ("LifecycleActionsExpired", "action-expired", 310, {}),
    "keep-alive": ("LifecycleActionsExpired", "action-expired", 250, {}),
    "first confirmation": ("LifecycleActionsUnknown", "unknown-action", 10, {"verified_at": None}),
}


def lifecycle_gone(found_at: str) -> tuple[World, Callable[[], StepEngine], str, str]:
    """A drain at its eviction whose action Auto Scaling no longer has, at the time its run finds so; a maker of
    engines over it (each delivery its own invocation), the page and the outcome it is found with."""
    page, outcome, at, changes = GONE[found_at]
    world = World()
    world.records.create(make_record(PLAN, Step.EVICT, **changes))
    world.autoscaling.active = False
    world.clock.advance(at)

    def engine() -> StepEngine:
        return world.engine({Step.EVICT: Script([Outcome.wait(30)]), Step.CLEANUP: Script([Outcome.next()])})

    return world, engine, page, outcome


@pytest.mark.parametrize("found_at", list(GONE))
def test_a_run_whose_commit_past_a_gone_action_is_refused_pages_it_once(found_at: str) -> None:
    # Given a lifecycle whose action is gone, whose first commit past it DynamoDB refuses (throttled past the
    # client's retries; as a run killed before its commit)
    world, engine, page, outcome = lifecycle_gone(found_at)
    commit_fails_once(world.records, TransientError("ProvisionedThroughputExceededException"))
    message = world.message()
    with pytest.raises(TransientError):
        engine().handle(message)

    # When its message is delivered again
    world.clock.advance(5)
    engine().handle(message)

    # Then the lifecycle is past its action once, and paged once (before: twice, the refused run's count out)
    assert (world.record().outcome, world.record().finished) == (outcome, True)
    assert world.metrics.counts[page] == 1


@pytest.mark.parametrize("found_at", list(GONE))
def test_two_deliveries_that_find_an_action_gone_page_it_once(found_at: str) -> None:
    # Given a lifecycle whose action is gone, its message delivered twice at once: the other delivery finds the
    # action gone too, and commits first, while this one's commit is on its way
    world, engine, page, outcome = lifecycle_gone(found_at)
    message = world.message()
    commit = world.records.commit

    def other_delivery_first(record: LifecycleRecord, expected_seq: int) -> bool:
        world.records.commit = commit  # type: ignore[method-assign]
        engine().handle(message)
        return commit(record, expected_seq)

    world.records.commit = other_delivery_first  # type: ignore[method-assign]

    # When both have run
    engine().handle(message)

    # Then the lifecycle is past its action once, and paged once: by the delivery whose commit landed
    assert (world.record().outcome, world.record().finished) == (outcome, True)
    assert world.metrics.counts[page] == 1


def test_a_sweep_that_finds_an_action_gone_after_the_engine_did_pages_it_once() -> None:
    # Given a drain at its eviction, its action gone, its message due at the sweep that heartbeats it: the sweep
    # reads the record, finds the action gone (and the lifecycle where it read it), and the engine's run finds it
    # gone too and commits before the sweep's write
    repair = Repair()
    repair.autoscaling.active = False
    drain = make_record(PLAN, Step.EVICT, node="n1")
    repair.records.create(drain)
    repair.clock.current = drain.heartbeat_deadline - MARGIN
    engine = World(
        clock=repair.clock,
        records=repair.records,
        queues=repair.queues,
        autoscaling=repair.autoscaling,
        metrics=repair.metrics,
    ).engine({Step.EVICT: Script([Outcome.wait(30)]), Step.CLEANUP: Script([Outcome.next()])})
    commit = repair.records.commit

    def engine_first(record: LifecycleRecord, expected_seq: int) -> bool:
        repair.records.commit = commit  # type: ignore[method-assign]
        engine.handle(WorkMessage(record_id=drain.id, seq=drain.seq, step=drain.step))
        return commit(record, expected_seq)

    repair.records.commit = engine_first  # type: ignore[method-assign]

    # When the sweep's write past the action loses to the engine's
    repair.run()

    # Then the expiry is the engine's, paged once (before: the sweep's count too)
    moved = repair.records.get(drain.id)
    assert moved is not None
    assert (moved.outcome, moved.finished) == ("action-expired", True)
    assert repair.metrics.counts["LifecycleActionsExpired"] == 1
