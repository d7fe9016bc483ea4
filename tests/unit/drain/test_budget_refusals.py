"""The budget ConfigMap refused (RBAC's 403, as the ConfigMap store raises it: the domain's Refused) in the steps
that do not decide on it themselves, run by the step engine: a waiter's ask, a cleanup's release."""

from __future__ import annotations

import pytest

from nodecycle.domain.engine import MAX_REFUSED_ATTEMPTS, Handled, Outcome
from nodecycle.domain.model import Step
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.cluster import Refused
from tests.support.fakes import T0
from tests.unit.drain.test_drain_steps import (
    NODE,
    FakeCluster,
    FakeSlots,
    acquire,
    cleanup,
    node,
    terminating,
)
from tests.unit.foundation.test_engine import Script, World

WHY = (
    'configmaps "nodecycle-budget" is forbidden: User "nodecycle:drain" cannot update resource "configmaps" in '
    'API group "" in the namespace "nodecycle"'
)


def test_a_waiter_refused_the_budget_asks_again_with_backoff_told_and_counted() -> None:
    # Given a lifecycle about to ask for a slot, and RBAC refusing the budget ConfigMap for a while
    world = World()
    record = terminating(Step.ACQUIRE_SLOT)
    world.records.create(record)
    slots = FakeSlots(refused=WHY)
    cordon = Script([Outcome.wait(5)])
    engine = world.engine(
        {Step.ACQUIRE_SLOT: acquire(FakeCluster(nodes={NODE: node()}), slots), Step.CORDON: cordon}
    )

    # When its step runs
    handled = engine.handle(world.message())

    # Then the engine asks again later (the message is not failed for SQS to redeliver and dead-letter), with
    # the refusal on the record and counted; nothing was taken
    after = world.record()
    assert handled is Handled.RAN
    assert (after.step, after.attempts) == (Step.ACQUIRE_SLOT, 1)
    assert after.due_at > T0
    assert WHY in (after.last_error or "")
    assert world.metrics.counts["StepRetries[reason=refused]"] == 1
    assert slots.holders == set()

    # And once the refusal is over, its next ask takes the slot
    slots.refused = None
    world.clock.current = after.due_at
    engine.handle(world.message())
    assert slots.holders == {NODE}
    assert cordon.runs


def test_a_waiter_refused_the_budget_again_and_again_fails_its_message_for_the_dead_letter_queue() -> None:
    # Given a waiter refused as often in a row as the engine retries a refusal, but once
    world = World()
    record = terminating(
        Step.ACQUIRE_SLOT, attempts=MAX_REFUSED_ATTEMPTS - 1, refusals=MAX_REFUSED_ATTEMPTS - 1
    )
    world.records.create(record)
    engine = world.engine(
        {Step.ACQUIRE_SLOT: acquire(FakeCluster(nodes={NODE: node()}), FakeSlots(refused=WHY))}
    )

    # When it is refused once more, its message fails (delivered again, then dead-lettered: the alarm)
    with pytest.raises(Refused):
        engine.handle(world.message())
    assert world.record() == record


def test_a_cleanup_refused_the_release_of_its_slot_gives_it_back_once_allowed() -> None:
    # Given a lifecycle whose action is completed, at its cleanup, and its slot's release refused for a while
    world = World()
    record = terminating(
        Step.CLEANUP, node=NODE, completed_at=T0, result=ActionResult.CONTINUE, outcome="drained"
    )
    world.records.create(record)
    slots = FakeSlots(holders={NODE}, refused=WHY)
    engine = world.engine({Step.CLEANUP: cleanup(FakeCluster(nodes={NODE: node()}), slots)})

    # When the cleanup runs
    handled = engine.handle(world.message())

    # Then it is asked again later rather than failed, the slot still held
    after = world.record()
    assert handled is Handled.RAN
    assert (after.step, after.attempts) == (Step.CLEANUP, 1)
    assert slots.released == []

    # And once the refusal is over, the slot is given back and the lifecycle ends
    slots.refused = None
    world.clock.current = after.due_at
    engine.handle(world.message())
    assert slots.released == [NODE]
    assert world.record().step is Step.DONE
