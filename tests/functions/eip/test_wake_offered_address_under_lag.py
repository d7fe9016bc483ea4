"""An address given back to its pool is taken by the launch woken for it within a second, EC2's reads lagging.

The release that gives a pool address back wakes the first launch in line (nodecycle.domain.eip.wake). Under EC2's
lag (sandbox/nodecycle_sandbox/aws/ec2_consistency.py), the woken look lists the pool as it was before the
disassociation: nothing free. Before the release offered the address it freed to the waiter, the look waited the
first in line's 15 s, and the address sat unused meanwhile. The woken look now tries the offered address directly:
AssociateAddress decides on EC2's own state (free), with AllowReassociation false (nothing moved). On moto through
the eip function, the lag's clock moved on by each step's delay (no test sleeps)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import boto3
import pytest

from nodecycle.adapters.aws import clients
from nodecycle.adapters.aws.address_lines import DynamoAddressLines
from nodecycle.domain.eip.line import line_key
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.ports.addresses import OWNER_TAG, POOL_TAG
from nodecycle.domain.ports.lifecycle import WorkMessage
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
from tests.support.events import sqs_event
from tests.support.functions import LambdaContext, load_function
from tests.support.stack import Stack, receive_all
from tests.unit.eip.fakes import launch_record, terminate_record

OWNER = "stack-a"  # tests/conftest.py's stack
FUNCTION_KEY = "AKIAFUNCTIONEIPWAKE0"  # the eip function's: its reads lag
WINDOW = 6.0  # seconds of lag: seconds under load


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
    (address,) = [a for a in addresses(**{f"tag:{POOL_TAG}": "ci"}) if a["AllocationId"] == allocation_id]
    return address.get("InstanceId")


def wake_ups(stack: Stack, record: LifecycleRecord) -> list[dict[str, Any]]:
    bodies = (json.loads(message["Body"]) for message in receive_all(stack.eip_queue))
    return [body for body in bodies if body.get("wake") and body["record_id"] == record.id]


def drain_queue(stack: Stack) -> None:
    sqs = boto3.client("sqs")
    for message in receive_all(stack.eip_queue):
        sqs.delete_message(QueueUrl=stack.eip_queue, ReceiptHandle=message["ReceiptHandle"])


def test_a_waiter_woken_for_an_address_given_back_takes_it_within_a_second_under_lag(
    eip_fn: ModuleType,
    stack: Stack,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a pool of one address held by an old instance for long, a launch waiting first in line for it, and
    # EC2 whose reads lag its writes by WINDOW seconds
    pooled = allocate(**{OWNER_TAG: OWNER, POOL_TAG: "ci"})
    old, waiting = run_instances(2)
    eip_fn.handler(work_event(given(stack, launch_record(old, at=now()))), LambdaContext())
    assert holder(pooled) == old
    launch = given(stack, launch_record(waiting, at=now()))
    eip_fn.handler(work_event(launch), LambdaContext())
    assert current(stack, launch).step is Step.ASSIGN_EIP
    drain_queue(stack)
    LAG.arm(WINDOW, [FUNCTION_KEY], clock)
    clock.now += 2 * WINDOW  # (the old association and the launch's instance known to every read)
    calls: list[dict[str, Any]] = []
    ec2 = clients.client("ec2")  # (the function's: ec2_signing_as)
    associate = ec2.associate_address

    def recorded(**kwargs: Any) -> Any:
        calls.append(kwargs)
        return associate(**kwargs)

    monkeypatch.setattr(ec2, "associate_address", recorded)

    # When the old instance's terminate gives the address back, and the launch runs from its wake-up on, each of
    # its runs when due
    eip_fn.handler(work_event(given(stack, terminate_record(old, at=now()))), LambdaContext())
    assert holder(pooled) is None
    released = clock.now
    (wake,) = wake_ups(stack, launch)
    eip_fn.handler(sqs_event(wake), LambdaContext())
    taken: float | None = clock.now if holder(pooled) == waiting else None
    for _ in range(20):
        stored = current(stack, launch)
        if stored.step is not Step.ASSIGN_EIP:
            break
        clock.now += max(0.0, (stored.due_at - stored.updated_at).total_seconds()) if stored.due_at else 0.0
        eip_fn.handler(work_event(due_now(stack, stored)), LambdaContext())
        if taken is None and holder(pooled) == waiting:
            taken = clock.now

    # Then the launch holds the address about a second after its release (not the first in line's 15 s), goes on,
    # and no association was ever moved
    assert taken is not None
    assert taken - released <= 1.0, f"the address given back idled {taken - released:.0f} s"
    assert current(stack, launch).step is not Step.ASSIGN_EIP
    assert holder(pooled) == waiting
    # ...its verification taking the reads that still show the old association for reads behind, not for the
    # address taken by another (each such start over counts toward the launch's failure)
    assert not [r.getMessage() for r in caplog.records if "assigning an address again" in r.getMessage()]
    assert calls
    assert all(call["AllowReassociation"] is False for call in calls)


def test_one_address_offered_to_two_woken_waiters_is_taken_by_one_and_moved_from_no_one(
    eip_fn: ModuleType, stack: Stack, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a pool of one address held by an old instance, two launches waiting in line for it, and EC2 whose reads
    # lag its writes
    pooled = allocate(**{OWNER_TAG: OWNER, POOL_TAG: "ci"})
    old, first, second = run_instances(3)
    eip_fn.handler(work_event(given(stack, launch_record(old, at=now()))), LambdaContext())
    waiters = [given(stack, launch_record(instance, at=now())) for instance in (first, second)]
    for waiter in waiters:
        eip_fn.handler(work_event(waiter), LambdaContext())
        assert current(stack, waiter).step is Step.ASSIGN_EIP
    drain_queue(stack)
    LAG.arm(WINDOW, [FUNCTION_KEY], clock)
    clock.now += 2 * WINDOW
    calls: list[dict[str, Any]] = []
    ec2 = clients.client("ec2")
    associate = ec2.associate_address

    def recorded(**kwargs: Any) -> Any:
        calls.append(kwargs)
        return associate(**kwargs)

    monkeypatch.setattr(ec2, "associate_address", recorded)

    # When the old instance's terminate gives the address back: only the first waiter is woken, and offered it
    eip_fn.handler(work_event(given(stack, terminate_record(old, at=now()))), LambdaContext())
    (wake,) = wake_ups(stack, waiters[0])
    assert wake_ups(stack, waiters[1]) == []
    lines = DynamoAddressLines(stack.table)
    key = line_key(OWNER, "ci")
    offer = lines.offered(key, waiters[0].id)
    assert offer is not None
    assert offer.allocation_id == pooled
    assert lines.offered(key, waiters[1].id) is None
    # ...and when the second is offered the same address too (a duplicate offer, a release and a sweep both
    # counting it) and both woken looks run, the second's first
    lines.offer(key, waiters[1].id, offer)
    behind = current(stack, waiters[1])
    second_wake = WorkMessage(
        record_id=behind.id, seq=behind.seq, step=behind.step, wake=True, token=behind.token
    )
    eip_fn.handler(sqs_event(second_wake.model_dump_json()), LambdaContext())
    eip_fn.handler(sqs_event(json.dumps(wake)), LambdaContext())

    # Then one of them holds it, the other is refused (not moved: AllowReassociation false) and waits in line
    assert holder(pooled) == second
    assert [call["AllowReassociation"] for call in calls] == [False, False]
    assert [call["InstanceId"] for call in calls] == [second, first]
    assert current(stack, waiters[0]).step is Step.ASSIGN_EIP
    # And their looks from then on never move the address off the one that holds it
    for _ in range(3):
        for waiter in waiters:
            stored = current(stack, waiter)
            if stored.step is Step.ASSIGN_EIP:
                clock.now += 5
                eip_fn.handler(work_event(due_now(stack, stored)), LambdaContext())
    assert holder(pooled) == second
    assert current(stack, waiters[0]).step is Step.ASSIGN_EIP
    assert current(stack, waiters[1]).step is not Step.ASSIGN_EIP
    assert all(call["AllowReassociation"] is False for call in calls)
