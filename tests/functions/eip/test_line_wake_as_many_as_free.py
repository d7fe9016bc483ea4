"""An address given back, or a launch leaving a pool's line, wakes as many of the first waiters as there are free
addresses of the pool now, no more: the first F waiters of the line may each take one of F free addresses. Before,
each wake woke one launch: a terminate returning an address while another was free still (its waiter's wake-up not
run yet) woke the first waiter again, and a launch leaving the line woke one, so a second free address idled until
the next waiter's own look (up to a minute for one that was not first). On moto, through the eip function as
wired (nodecycle.wiring.eip)."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import boto3
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
    work_event,
)
from tests.support.events import sqs_event
from tests.support.functions import LambdaContext
from tests.support.stack import Stack, receive_all
from tests.unit.eip.fakes import launch_record, terminate_record

OWNER = "stack-a"  # tests/conftest.py's stack


def wake_ups(stack: Stack, seen: set[str]) -> dict[str, dict[str, Any]]:
    """The wake-ups on the eip queue not ``seen`` before (received, not deleted), by record id."""
    fresh = [message for message in receive_all(stack.eip_queue) if message["MessageId"] not in seen]
    seen.update(message["MessageId"] for message in fresh)
    bodies = (json.loads(message["Body"]) for message in fresh)
    return {body["record_id"]: body for body in bodies if body.get("wake")}


def a_pool_of_two_held_and_three_waiting(
    eip_fn: ModuleType, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[str], list[LifecycleRecord]]:
    """Two old instances holding the pool's two addresses, and three launches waiting in its line, in order."""
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "pool")
    monkeypatch.setenv("NODECYCLE_EIP_POOL_NAME", "ci")
    for _ in range(2):
        allocate(**{OWNER_TAG: OWNER, POOL_TAG: "ci"})
    *olds, first, second, third = run_instances(5)
    for old in olds:
        eip_fn.handler(work_event(given(stack, launch_record(old, at=now()))), LambdaContext())
    waiting = []
    for instance in (first, second, third):
        launch = given(stack, launch_record(instance, at=now()))
        eip_fn.handler(work_event(launch), LambdaContext())
        assert current(stack, launch).step is Step.ASSIGN_EIP
        waiting.append(launch)
    return olds, waiting


def test_an_address_returned_while_another_is_free_wakes_the_first_two_waiters_not_the_third(
    eip_fn: ModuleType, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the pool's two addresses held, three launches waiting, and one old instance's terminate has returned
    # its address, waking the first launch (its wake-up not run yet)
    seen: set[str] = set()
    (old1, old2), (first, second, third) = a_pool_of_two_held_and_three_waiting(eip_fn, stack, monkeypatch)
    eip_fn.handler(work_event(given(stack, terminate_record(old1, at=now()))), LambdaContext())
    assert list(wake_ups(stack, seen)) == [first.id]

    # When the other old instance's terminate returns its address
    eip_fn.handler(work_event(given(stack, terminate_record(old2, at=now()))), LambdaContext())

    # Then the second launch is woken too (two addresses free, two waiters first in line), and not the third
    woken = wake_ups(stack, seen)
    assert set(woken) == {first.id, second.id}
    assert third.id not in woken


def test_a_launch_leaving_the_line_while_two_addresses_are_free_wakes_the_next_two(
    eip_fn: ModuleType, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the pool's two addresses returned by their terminates, three launches waiting
    seen: set[str] = set()
    olds, (first, second, third) = a_pool_of_two_held_and_three_waiting(eip_fn, stack, monkeypatch)
    for old in olds:
        eip_fn.handler(work_event(given(stack, terminate_record(old, at=now()))), LambdaContext())
    woken = wake_ups(stack, seen)
    assert first.id in woken

    # When the first launch's instance is terminated before its wake-up runs (its look finds it gone)
    boto3.client("ec2").terminate_instances(InstanceIds=[first.instance_id])
    eip_fn.handler(sqs_event(woken[first.id]), LambdaContext())
    assert current(stack, first).outcome == "instance-gone"

    # Then the next two launches are woken (two addresses free for them), and their looks take both
    woken = wake_ups(stack, seen)
    assert set(woken) == {second.id, third.id}
    for launch in (second, third):
        eip_fn.handler(sqs_event(woken[launch.id]), LambdaContext())
    held = {a.get("InstanceId") for a in addresses(**{f"tag:{POOL_TAG}": "ci"})}
    assert held == {second.instance_id, third.instance_id}
