"""The line of launches waiting for a pool address on moto's DynamoDB (the lifecycle table), through the eip
function and under concurrent writers: first come, first served."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from types import ModuleType
from typing import Any

import boto3
import pytest

from nodecycle.adapters.aws.address_lines import DynamoAddressLines
from nodecycle.domain.eip.line import MAX_WAITERS, PoolLine, Waiter
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import LifecycleRecord, Step, Transition, adopted_token, record_id
from nodecycle.domain.ports.addresses import OWNER_TAG, POOL_TAG
from tests.functions.eip.conftest import (
    addresses,
    allocate,
    current,
    due_now,
    now,
    run_instances,
    store,
    work_event,
)
from tests.support.functions import LambdaContext
from tests.support.stack import Stack
from tests.unit.eip.fakes import FakeLines, launch_record, terminate_record

OWNER = "stack-a"  # tests/conftest.py's stack


def held_by(instance: str) -> list[str]:
    return [
        a["AllocationId"] for a in addresses(**{f"tag:{POOL_TAG}": "ci"}) if a.get("InstanceId") == instance
    ]


def test_an_address_given_back_goes_to_the_launch_waiting_longest_not_to_a_new_one(
    eip_fn: ModuleType, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a pool of one address held by an old instance, and a replacement that found the pool empty
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "pool")
    monkeypatch.setenv("NODECYCLE_EIP_POOL_NAME", "ci")
    pooled = allocate(**{OWNER_TAG: OWNER, POOL_TAG: "ci"})
    old, waiting, new = run_instances(3)
    eip_fn.handler(work_event(store_new(stack, launch_record(old, at=now()))), LambdaContext())
    assert held_by(old) == [pooled]
    first = store_new(stack, launch_record(waiting, at=now()))
    eip_fn.handler(work_event(first), LambdaContext())
    assert current(stack, first).step is Step.ASSIGN_EIP  # waits

    # When the old instance gives its address back, and a new launch runs before the waiter looks again
    eip_fn.handler(work_event(store_new(stack, terminate_record(old, at=now()))), LambdaContext())
    second = store_new(stack, launch_record(new, at=now()))
    eip_fn.handler(work_event(second), LambdaContext())

    # Then the new launch leaves the free address to the waiter, and waits in line behind it
    assert held_by(new) == []
    assert current(stack, second).step is Step.ASSIGN_EIP
    # And the waiter takes it at its next look
    eip_fn.handler(work_event(due_now(stack, first)), LambdaContext())
    assert held_by(waiting) == [pooled]
    assert current(stack, first).step is not Step.ASSIGN_EIP
    line = DynamoAddressLines(stack.table).read(f"{OWNER}/ci")
    assert [waiter.instance_id for waiter in line.waiters] == [new]


def store_new(stack: Stack, record: LifecycleRecord) -> LifecycleRecord:
    assert store(stack).create(record)
    return record


def test_twenty_launches_joining_a_line_at_once_all_wait_in_it_in_the_order_they_came(stack: Stack) -> None:
    # Given twenty launches that found the pool empty, a millisecond apart, each with its own DynamoDB client
    start = now()
    waiters = [
        Waiter(
            start + timedelta(milliseconds=n), f"lifecycle-{n:02d}", f"i-{n:02d}", start + timedelta(hours=1)
        )
        for n in range(20)
    ]
    barrier = threading.Barrier(len(waiters))

    def join(waiter: Waiter) -> int:
        """Join as ASSIGN_EIP does: a join whose writes all lost the race is made again at the next look."""
        line = PoolLine(DynamoAddressLines(stack.table, boto3.client("dynamodb")), f"{OWNER}/ci")
        barrier.wait(timeout=30)
        for look in range(1, len(waiters) + 1):
            try:
                line.join(waiter, start)
            except TransientError:
                continue
            return look
        return 0

    # When they all join the line at the same moment (conditional writes racing)
    with ThreadPoolExecutor(max_workers=len(waiters)) as threads:
        looks = list(threads.map(join, waiters))

    # Then every one is in line (some at a later look), once, in the order it came, whoever wrote first
    assert 0 not in looks
    line = DynamoAddressLines(stack.table).read(f"{OWNER}/ci")
    assert list(line.waiters) == waiters
    # And a waiter leaving takes only itself out
    PoolLine(DynamoAddressLines(stack.table), f"{OWNER}/ci").leave("lifecycle-05", start)
    line = DynamoAddressLines(stack.table).read(f"{OWNER}/ci")
    assert [waiter.lifecycle for waiter in line.waiters] == [
        w.lifecycle for w in waiters if w.lifecycle != "lifecycle-05"
    ]


def test_a_full_line_fits_in_its_item_and_reads_back_whole(stack: Stack) -> None:
    # Given a line as long as it may grow, of lifecycle ids as long as real ones (instance/transition/token)
    start = now()
    waiters = [
        Waiter(
            start + timedelta(microseconds=n),
            f"i-{n:017x}/launch/{n:08x}-1f2e-4d3c-8b4a-0123456789ab",
            f"i-{n:017x}",
            start + timedelta(hours=1, microseconds=n),
        )
        for n in range(MAX_WAITERS)
    ]
    lines = DynamoAddressLines(stack.table)

    # When it is written, Then DynamoDB takes it (under its 400 KB per item) and it reads back whole
    assert lines.write(f"{OWNER}/ci", waiters, 0)
    assert list(lines.read(f"{OWNER}/ci").waiters) == waiters


def test_a_waiting_launch_delivered_twice_in_one_batch_stands_in_line_once_and_takes_one_address(
    eip_fn: ModuleType, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a pool whose one address an old instance holds, and a launch whose message comes twice in a batch
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "pool")
    monkeypatch.setenv("NODECYCLE_EIP_POOL_NAME", "ci")
    pooled = allocate(**{OWNER_TAG: OWNER, POOL_TAG: "ci"})
    old, waiting = run_instances(2)
    eip_fn.handler(work_event(store_new(stack, launch_record(old, at=now()))), LambdaContext())
    launch = store_new(stack, launch_record(waiting, at=now()))

    # When both deliveries find the pool empty
    eip_fn.handler(work_event(launch, launch), LambdaContext())

    # Then the launch is in line once, and waits
    line = DynamoAddressLines(stack.table).read(f"{OWNER}/ci")
    assert [waiter.instance_id for waiter in line.waiters] == [waiting]
    assert current(stack, launch).step is Step.ASSIGN_EIP
    # And when the address comes back, both deliveries of its next look leave it one address and an empty line
    eip_fn.handler(work_event(store_new(stack, terminate_record(old, at=now()))), LambdaContext())
    due = due_now(stack, launch)
    eip_fn.handler(work_event(due, due), LambdaContext())
    assert held_by(waiting) == [pooled]
    assert DynamoAddressLines(stack.table).read(f"{OWNER}/ci").waiters == ()


def dynamodb_size(value: dict[str, Any]) -> int:
    """The size DynamoDB counts for an attribute value (its documented rules): a string's UTF-8 bytes, a
    number's about one byte per two digits plus one, a list or a map 3 bytes and 1 a member, plus its members
    (and a map's member names)."""
    ((kind, content),) = value.items()
    if kind == "S":
        return len(content.encode())
    if kind == "N":
        return (len(content.lstrip("-").replace(".", "")) + 1) // 2 + 1
    if kind == "L":
        return 3 + sum(dynamodb_size(member) + 1 for member in content)
    if kind == "M":
        return 3 + sum(len(name.encode()) + dynamodb_size(member) + 1 for name, member in content.items())
    raise AssertionError(f"no size rule for {kind}")


def test_a_line_of_the_longest_lifecycle_ids_stops_growing_a_tenth_under_dynamodbs_item_limit(
    stack: Stack,
) -> None:
    # Given launches with the longest lifecycle ids a launch can have (adopted by the sweeper under a hook name
    # of 255 characters), as many as a line takes, joining it one after another (in memory: a thousand joins
    # of a growing item take minutes on moto)
    start = now()
    key = f"{OWNER}/ci"
    joined = FakeLines()
    for n in range(MAX_WAITERS):
        instance = f"i-{n:017x}"
        lifecycle = record_id(instance, Transition.LAUNCHING, adopted_token("h" * 255))
        waiter = Waiter(start + timedelta(microseconds=n), lifecycle, instance, start + timedelta(hours=1))
        PoolLine(joined, key).join(waiter, start)

    # When the line they made is written to the table
    assert DynamoAddressLines(stack.table).write(key, joined.lines[key].waiters, 0)

    # Then its item, as DynamoDB counts it, keeps a tenth of its 400 KB (409,600 bytes) free: a write past it
    # is refused for good, and every launch that found the pool empty would fail its message joining the line
    dynamodb: Any = boto3.client("dynamodb")
    item = dynamodb.get_item(TableName=stack.table, Key={"id": {"S": f"eip-line#{key}"}})["Item"]
    size = sum(len(name.encode()) + dynamodb_size(value) for name, value in item.items())
    assert size <= 0.9 * 400 * 1024, size
    # And the line stopped short of the thousand waiters a line of shorter ids takes (the later launches wait
    # out of it); what it holds reads back whole
    assert 700 <= len(joined.lines[key].waiters) < MAX_WAITERS
    assert DynamoAddressLines(stack.table).read(key).waiters == joined.lines[key].waiters


def test_a_launch_whose_lifecycle_ended_in_line_is_taken_out_of_it_by_the_launch_it_would_keep_waiting(
    eip_fn: ModuleType, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a pool whose one address an old instance holds, and a launch that found it empty and waits in line
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "pool")
    monkeypatch.setenv("NODECYCLE_EIP_POOL_NAME", "ci")
    pooled = allocate(**{OWNER_TAG: OWNER, POOL_TAG: "ci"})
    old, lapsed, new = run_instances(3)
    eip_fn.handler(work_event(store_new(stack, launch_record(old, at=now()))), LambdaContext())
    waiting = store_new(stack, launch_record(lapsed, at=now()))
    eip_fn.handler(work_event(waiting), LambdaContext())
    assert [w.instance_id for w in DynamoAddressLines(stack.table).read(f"{OWNER}/ci").waiters] == [lapsed]
    # And its lifecycle then ends without the step (its action completed by hand): its instance runs on
    stored = current(stack, waiting)
    assert store(stack).commit(
        stored.model_copy(update={"step": Step.DONE, "finished_at": now()}), stored.seq
    )

    # When the old instance gives its address back, and a new launch looks
    eip_fn.handler(work_event(store_new(stack, terminate_record(old, at=now()))), LambdaContext())
    eip_fn.handler(work_event(store_new(stack, launch_record(new, at=now()))), LambdaContext())

    # Then the new launch takes it, and the launch over is out of the line (no later look need find it over)
    assert held_by(new) == [pooled]
    assert DynamoAddressLines(stack.table).read(f"{OWNER}/ci").waiters == ()
