"""A pool address the sweep takes back from a gone instance is taken by the launch woken for it within a second,
EC2's reads lagging.

The terminate's release offers each pool address it returns to the waiter it wakes for it
(nodecycle.domain.eip.wake): the woken look, listing the pool before EC2's reads show the disassociation, tries the
offered address directly. The sweep woke the waiter without an offer, and its look, finding nothing free, waited the
first in line's 15 s until EC2's reads showed the address free, the address idle meanwhile (a minute under this lag).
On moto through the eip function and the sweeper's address part (its eip wiring), the lag's clock moved on by each
step's delay (no test sleeps). The warm-pool release's return of its launch's claim, which no listing shows, is
tests/unit/eip/test_offers_of_every_return.py's (the sandbox's lag never shows a claim to one read and not to
another once EC2's writes know it)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import boto3
import pytest

from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.ports.addresses import OWNER_TAG, POOL_TAG
from nodecycle.wiring import sweeper
from nodecycle.wiring.eip import address_sweep
from nodecycle_sandbox.aws.ec2_consistency import LAG
from tests.functions.eip.conftest import (
    Clock,
    addresses,
    allocate,
    current,
    due_now,
    given,
    lagging_clock,
    now,
    run_instances,
    work_event,
)
from tests.functions.eip.test_address_sweep_on_ec2 import shutting_down
from tests.support.events import sqs_event
from tests.support.functions import LambdaContext, load_function
from tests.support.stack import Stack, receive_all
from tests.unit.eip.fakes import launch_record
from tests.unit.sweeper.test_orphans import AMPLE

OWNER = "stack-a"  # tests/conftest.py's stack
FUNCTION_KEY = "AKIAFUNCTIONEIPOFFER"  # the eip function's and the sweeper's: their reads lag
WINDOW = 60.0  # seconds of lag: a minute under heavy load


@pytest.fixture
def clock(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    yield from lagging_clock(FUNCTION_KEY, monkeypatch)


@pytest.fixture
def eip_fn(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "pool")
    monkeypatch.setenv("NODECYCLE_EIP_POOL_NAME", "ci")
    return load_function("eip")


def holder(allocation_id: str) -> str | None:
    """The instance holding the address, as EC2 has it now (the test's reads do not lag)."""
    (address,) = [a for a in addresses() if a["AllocationId"] == allocation_id]
    return address.get("InstanceId")


def wake_up(stack: Stack, record: LifecycleRecord) -> dict[str, Any]:
    sqs = boto3.client("sqs")
    woken = []
    for message in receive_all(stack.eip_queue):
        body = json.loads(message["Body"])
        if body.get("wake") and body["record_id"] == record.id:
            woken.append(body)
        sqs.delete_message(QueueUrl=stack.eip_queue, ReceiptHandle=message["ReceiptHandle"])
    (wake,) = woken
    return wake


def waiting(eip_fn: ModuleType, stack: Stack, instance: str) -> LifecycleRecord:
    launch = given(stack, launch_record(instance, at=now()))
    eip_fn.handler(work_event(launch), LambdaContext())
    assert current(stack, launch).step is Step.ASSIGN_EIP
    return launch


def seconds_to_take(
    eip_fn: ModuleType, stack: Stack, clock: Clock, launch: LifecycleRecord, pooled: str, wake: dict[str, Any]
) -> float:
    """From the wake-up on, the launch's runs each when due: the seconds until its instance holds the address."""
    given_back = clock.now
    eip_fn.handler(sqs_event(json.dumps(wake)), LambdaContext())
    for _ in range(20):
        if holder(pooled) == launch.instance_id:
            return clock.now - given_back
        stored = current(stack, launch)
        assert stored.step is Step.ASSIGN_EIP
        clock.now += max(0.0, (stored.due_at - stored.updated_at).total_seconds()) if stored.due_at else 0.0
        eip_fn.handler(work_event(due_now(stack, stored)), LambdaContext())
    raise AssertionError("the address was never taken")


def test_a_pool_address_the_sweep_takes_from_a_gone_instance_is_taken_by_the_waiter_within_a_second(
    eip_fn: ModuleType, stack: Stack, clock: Clock
) -> None:
    # Given a pool of one address held by an instance for long, a launch waiting first in line for it, and EC2 whose
    # reads lag its writes by WINDOW seconds
    pooled = allocate(**{OWNER_TAG: OWNER, POOL_TAG: "ci"})
    gone, launching = run_instances(2)
    eip_fn.handler(work_event(given(stack, launch_record(gone, at=now()))), LambdaContext())
    assert holder(pooled) == gone
    launch = waiting(eip_fn, stack, launching)
    LAG.arm(WINDOW, [FUNCTION_KEY], clock)
    clock.now += 2 * WINDOW  # (the association and the instances known to every read)

    # When the instance goes without its hook (its release never ran) and the sweep takes the address back
    shutting_down(gone)
    report = address_sweep(sweeper.settings(), sweeper.shared())(AMPLE)
    assert (report.returned, holder(pooled)) == (1, None)

    # Then the launch woken for it holds it within a second (not the first in line's 15 s)
    taken = seconds_to_take(eip_fn, stack, clock, launch, pooled, wake_up(stack, launch))
    assert taken <= 1.0, f"the address the sweep gave back idled {taken:.0f} s"
