"""The wake lane on moto: a budget wake-up goes to a queue of its own, which a function of its own polls, so
that it never waits behind the drain queue's polls (SQS has no priority within a queue)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from types import ModuleType

import pytest

from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle.domain.model import LifecycleRecord, Step, Transition, global_deadline
from nodecycle.wiring.common import Common
from tests.support.stack import Stack, receive_all

HEARTBEAT_TIMEOUT = 600


def waiter(now: datetime) -> LifecycleRecord:
    """A terminating node's lifecycle waiting for a budget slot: it asked, and retries in 30 s."""
    token = str(uuid.uuid4())
    return LifecycleRecord(
        id=f"i-0aaaaaaaaaaaaaaa1/terminate/{token}",
        owner="stack-a",
        instance_id="i-0aaaaaaaaaaaaaaa1",
        transition=Transition.TERMINATING,
        token=token,
        group="workers",
        hook="nodecycle-terminate",
        plan=(Step.ACQUIRE_SLOT, Step.CORDON, Step.EVICT, Step.COMPLETE, Step.CLEANUP, Step.DONE),
        step=Step.ACQUIRE_SLOT,
        seq=2,
        received_at=now,
        started_at=now,
        updated_at=now,
        due_at=now + timedelta(seconds=30),
        slot_waiting_since=now,
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
        heartbeat_deadline=now + timedelta(seconds=HEARTBEAT_TIMEOUT),
        global_deadline=global_deadline(now, HEARTBEAT_TIMEOUT),
    )


def wiring_of(function: str) -> ModuleType:
    if function == "drain":
        from nodecycle.wiring import drain

        return drain
    from nodecycle.wiring import sweeper

    return sweeper


@pytest.mark.parametrize("function", ["drain", "sweeper"])
def test_a_budget_wake_up_goes_to_the_wake_queue_not_behind_the_drain_queues_polls(
    stack: Stack, function: str
) -> None:
    # Given a lifecycle waiting for a budget slot
    now = datetime.now(UTC)
    waiting = waiter(now)
    assert DynamoRecordStore(stack.table, ttl=timedelta(days=1)).create(waiting)
    ports: Common = wiring_of(function).shared()

    # When a function that frees slots (the drain function's release, the sweeper's) wakes it
    ports.dispatcher().wake(waiting.id, token=waiting.token)

    # Then the wake-up is on the wake queue, and nothing on the drain queue
    woken = [json.loads(m["Body"]) for m in receive_all(stack.wake_queue)]
    assert [(m["record_id"], m["step"], m.get("wake")) for m in woken] == [
        (waiting.id, Step.ACQUIRE_SLOT.value, True)
    ]
    assert receive_all(stack.drain_queue) == []
