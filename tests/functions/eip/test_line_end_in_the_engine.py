"""A launch waiting in a pool's line whose action ends inside the engine rather than at its own step (the
global-timeout guard settles it, or a heartbeat finds it lapsed: timed out, or completed by an operator's
CompleteLifecycleAction) leaves the line as a launch that gives up does: the next waiter is woken at once, and
the address the launch ending was woken for goes to it. Before, nobody was woken: the address idled until the
next waiter's own look (up to a minute for one that was not first). On moto, through the eip function as wired
(nodecycle.wiring.eip)."""

from __future__ import annotations

import json
from datetime import timedelta
from types import ModuleType
from typing import Any

import pytest

from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.ports.addresses import OWNER_TAG, POOL_TAG
from tests.functions.eip.conftest import (
    addresses,
    allocate,
    current,
    given,
    now,
    run_instances,
    store,
    work_event,
)
from tests.support.events import sqs_event
from tests.support.functions import LambdaContext
from tests.support.stack import Stack, receive_all
from tests.unit.eip.fakes import launch_record, terminate_record

OWNER = "stack-a"  # tests/conftest.py's stack


def wake_ups(stack: Stack, seen: set[str]) -> dict[str, dict[str, Any]]:
    """The wake-ups on the eip queue not ``seen`` before (the queue keeps them: they are received, not deleted),
    by record id."""
    fresh = [message for message in receive_all(stack.eip_queue) if message["MessageId"] not in seen]
    seen.update(message["MessageId"] for message in fresh)
    bodies = (json.loads(message["Body"]) for message in fresh)
    return {body["record_id"]: body for body in bodies if body.get("wake")}


def ending(stack: Stack, record: LifecycleRecord, how: str) -> None:
    """Bring the launch's action to its end as the engine will find it at its next run."""
    stored = current(stack, record)
    if how == "global-timeout":  # the guard settles it (its global timeout within the settle margin)
        changes = {"global_deadline": now() + timedelta(seconds=5)}
    else:  # its heartbeat deadline passed: the engine's heartbeat finds no active action (lapsed, or by hand)
        changes = {"heartbeat_deadline": now() - timedelta(seconds=1)}
    assert store(stack).commit(stored.model_copy(update=changes), expected_seq=stored.seq)


@pytest.mark.parametrize("how", ["global-timeout", "lapsed"])
def test_a_launch_whose_action_ends_in_the_engine_wakes_the_next_waiter_which_takes_the_address(
    eip_fn: ModuleType, stack: Stack, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    # Given a pool of one address held by an old instance, and two launches waiting in its line
    seen: set[str] = set()
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "pool")
    monkeypatch.setenv("NODECYCLE_EIP_POOL_NAME", "ci")
    pooled = allocate(**{OWNER_TAG: OWNER, POOL_TAG: "ci"})
    old, first, second = run_instances(3)
    eip_fn.handler(work_event(given(stack, launch_record(old, at=now()))), LambdaContext())
    ahead = given(stack, launch_record(first, at=now()))
    eip_fn.handler(work_event(ahead), LambdaContext())
    behind = given(stack, launch_record(second, at=now()))
    eip_fn.handler(work_event(behind), LambdaContext())
    assert current(stack, behind).step is Step.ASSIGN_EIP
    # And the old instance's terminate gives the address back, waking the first launch
    eip_fn.handler(work_event(given(stack, terminate_record(old, at=now()))), LambdaContext())
    woken = wake_ups(stack, seen)
    assert list(woken) == [ahead.id]

    # When the first launch's action ends as its wake-up runs (settled by the guard, or found lapsed)
    ending(stack, ahead, how)
    response = eip_fn.handler(sqs_event(woken[ahead.id]), LambdaContext())
    assert response.get("batchItemFailures", []) == []
    assert current(stack, ahead).step is not Step.ASSIGN_EIP
    assert [a.get("InstanceId") for a in addresses(**{f"tag:{POOL_TAG}": "ci"})] == [None]

    # Then the second launch is woken at once, and its look takes the address
    woken = wake_ups(stack, seen)
    assert list(woken) == [behind.id]
    eip_fn.handler(sqs_event(woken[behind.id]), LambdaContext())
    (address,) = [a for a in addresses(**{f"tag:{POOL_TAG}": "ci"}) if a["AllocationId"] == pooled]
    assert address.get("InstanceId") == second
