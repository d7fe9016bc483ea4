"""The sweeper's adoption of an orphaned action against the action's own late event, on the real record store
(DynamoDB on moto): whichever of the two lifecycles is written first, one lifecycle goes on for the action. And
an earlier lifecycle of the same instance and hook, over, blocks neither way of starting a later one."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import boto3
import pytest

from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle.domain.intake import IntakeOutcome
from nodecycle.domain.model import Step
from nodecycle.domain.policy import ActionResult
from tests.support.stack import Stack
from tests.unit.sweeper.test_orphans import AMPLE, HOOK, INSTANCE, INTERVAL, OWNER, TOKEN, World, adopted

pytestmark = pytest.mark.usefixtures("stack")


class LetsInFirst:
    """A DynamoDB client that lets another writer in just before one write: the first request that writes
    item ``record_id`` (a PutItem, or a transaction with it) waits until ``first`` has run."""

    def __init__(self, client: Any, record_id: str) -> None:
        self._client = client
        self._record_id = record_id
        self.first: Callable[[], object] | None = None

    def put_item(self, **request: Any) -> Any:
        self._before([request["Item"]])
        return self._client.put_item(**request)

    def transact_write_items(self, **request: Any) -> Any:
        self._before(
            [op["Item"] for item in request["TransactItems"] for op in item.values() if "Item" in op]
        )
        return self._client.transact_write_items(**request)

    def _before(self, items: list[dict[str, Any]]) -> None:
        if self.first is not None and any(item["id"]["S"] == self._record_id for item in items):
            first, self.first = self.first, None
            first()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def on_dynamodb(stack: Stack, client: Any | None = None) -> World:
    client = client or boto3.client("dynamodb")
    return World(records=DynamoRecordStore(stack.table, ttl=timedelta(days=1), dynamodb=client))


def first_steps(world: World) -> list[str]:
    """The lifecycles whose first step was sent: each one goes on."""
    return [sent.message.record_id for sent in world.queues.sent if sent.message.seq == 0]


def test_an_event_written_after_the_sweep_listed_the_open_lifecycles_is_not_adopted_again(
    stack: Stack,
) -> None:
    # Given an action first found held with no record, and the next sweep's listing of the open lifecycles
    world = on_dynamodb(stack)
    world.terminating()
    world.sweep()
    world.clock.advance(INTERVAL.total_seconds())
    listed = list(world.records.open_records(OWNER))

    # When its late event's record is written (intake's retry got through) before that sweep looks for orphans
    assert world.intake.accept(world.event()) is IntakeOutcome.ACCEPTED
    now = world.clock.now()
    report = world.part.keep_alive(listed, now, AMPLE) | world.part.adopt(listed, now, AMPLE)

    # Then the action has one lifecycle, its event's: the sweep adopts nothing
    assert report["LifecyclesAdopted"] == 0
    assert adopted(world) is None
    assert first_steps(world) == [world.event().record_id]


def test_an_adoption_written_while_the_late_event_is_taken_in_leaves_the_event_nothing_to_start(
    stack: Stack,
) -> None:
    # Given an action first found held with no record, whose late event intake takes in just as the next sweep
    # adopts it: the adoption is written after intake looked for one and before intake writes its own record
    client = LetsInFirst(boto3.client("dynamodb"), record_id=f"{INSTANCE}/terminate/{TOKEN}")
    world = on_dynamodb(stack, client)
    world.terminating()
    world.sweep()
    world.clock.advance(INTERVAL.total_seconds())
    reports: list[dict[str, int]] = []
    client.first = lambda: reports.append(world.sweep())

    # When both write
    outcome = world.intake.accept(world.event())

    # Then one lifecycle goes on: the adoption, written first; the event starts nothing
    assert [report["LifecyclesAdopted"] for report in reports] == [1]
    assert outcome is IntakeOutcome.ADOPTED
    assert world.records.get(world.event().record_id) is None
    record = adopted(world)
    assert record is not None
    assert record.step is Step.ACQUIRE_SLOT
    assert first_steps(world) == [record.id]


LATER = "0c9d8e7f-6a5b-4c3d-2e1f-0a9b8c7d6e5f"  # the token of a later action of the instance under the hook


def finish(world: World, record_id: str) -> None:
    """The lifecycle completes its action, and ends; the hook holds the instance no more."""
    record = world.records.get(record_id)
    assert record is not None
    assert world.autoscaling.complete(record.action, ActionResult.CONTINUE)
    now = world.clock.now()
    done = record.model_copy(
        update={
            "step": Step.DONE,
            "seq": record.seq + 1,
            "result": ActionResult.CONTINUE,
            "completed_at": now,
            "finished_at": now,
        }
    )
    assert world.records.commit(done, record.seq)
    world.autoscaling.waiting.clear()


def test_a_later_action_of_an_instance_whose_adopted_lifecycle_ended_starts_from_its_event(
    stack: Stack,
) -> None:
    # Given an action the sweeper adopted, whose lifecycle ended (the instance went into its warm pool)
    world = on_dynamodb(stack)
    world.terminating()
    world.sweep()
    world.clock.advance(INTERVAL.total_seconds())
    world.sweep()
    first = adopted(world)
    assert first is not None
    finish(world, first.id)

    # When the instance, back in service, is terminated again hours later and that action's event comes late
    world.clock.advance(3 * 3600)
    started = world.clock.now()
    world.terminating(token=LATER)
    world.clock.advance(INTERVAL.total_seconds())
    outcome = world.intake.accept(world.event(LATER, started))

    # Then its lifecycle starts: the adopted one of the earlier action does not stand for it
    assert outcome is IntakeOutcome.ACCEPTED
    assert first_steps(world) == [first.id, world.event(LATER).record_id]


def test_a_later_action_of_an_instance_whose_lifecycle_ended_is_adopted_when_its_event_is_lost(
    stack: Stack,
) -> None:
    # Given an action whose event became a lifecycle, which ended (the instance went into its warm pool)
    world = on_dynamodb(stack)
    world.terminating()
    assert world.intake.accept(world.event()) is IntakeOutcome.ACCEPTED
    finish(world, world.event().record_id)

    # When the instance, back in service, is held again hours later by an action whose event is lost
    world.clock.advance(3 * 3600)
    world.terminating(token=LATER)
    world.sweep()
    world.clock.advance(INTERVAL.total_seconds())
    report = world.sweep()

    # Then the sweeper adopts it: the earlier lifecycle does not stand for it
    assert report["LifecyclesAdopted"] == 1
    record = adopted(world)
    assert record is not None
    assert first_steps(world) == [world.event().record_id, record.id]


def test_an_action_held_right_after_an_adopted_lifecycle_of_the_instance_ended_is_adopted_again(
    stack: Stack,
) -> None:
    # Given an action the sweeper adopted, a sweep that lists its lifecycle open, and that lifecycle's end
    # right after (the instance stopped into its warm pool)
    world = on_dynamodb(stack)
    world.terminating()
    world.sweep()
    world.clock.advance(INTERVAL.total_seconds())
    world.sweep()
    first = adopted(world)
    assert first is not None
    world.clock.advance(INTERVAL.total_seconds())
    world.sweep()
    world.clock.advance(10)
    finish(world, first.id)

    # When the instance is held again at once (out of the pool and scaled in) by an action whose event is lost,
    # and two sweeps find it
    world.clock.advance(10)
    world.terminating(token=LATER)
    world.clock.advance(INTERVAL.total_seconds() - 20)
    world.sweep()
    world.clock.advance(INTERVAL.total_seconds())
    report = world.sweep()

    # Then the sweeper adopts it, on the record of the earlier adopted lifecycle, started again
    assert report["LifecyclesAdopted"] == 1
    again = adopted(world)
    assert again is not None
    assert (again.seq, again.step) == (first.seq + 2, Step.ACQUIRE_SLOT)
    assert first_steps(world) == [first.id]  # (its first step again, on the next seq)
    assert [(s.message.record_id, s.message.seq) for s in world.queues.sent][-1] == (first.id, again.seq)


def test_a_late_event_of_an_action_adopted_before_claims_were_kept_starts_no_second_lifecycle(
    stack: Stack,
) -> None:
    # Given an action the sweeper adopted while the release before this one ran: its record, with no claim
    # (the release wrote none), and its lifecycle still draining when this release is deployed
    client = boto3.client("dynamodb")
    world = on_dynamodb(stack, client)
    world.terminating()
    world.sweep()
    world.clock.advance(INTERVAL.total_seconds())
    world.sweep()
    first = adopted(world)
    assert first is not None
    client.delete_item(TableName=stack.table, Key={"id": {"S": f"claim#{INSTANCE}#terminate#{HOOK}"}})

    # When the action's event comes late (the dead-letter queue redriven after the upgrade)
    world.clock.advance(INTERVAL.total_seconds())
    outcome = world.intake.accept(world.event())

    # Then it finds the adopted lifecycle: the action has that one lifecycle only
    assert outcome is IntakeOutcome.ADOPTED
    assert world.records.get(world.event().record_id) is None
    assert first_steps(world) == [first.id]
