"""Two sweeps at once, on moto: the sweeper's reserved concurrency is 1, but an operator's invocation (``aws lambda
invoke``) of a function whose concurrency was raised, or a schedule of another deployment of the same owner,
can overlap the scheduled one. Each is a container of its own (its own first sightings of orphans); both list
the same open lifecycles and addresses before either acts. Whatever they repair is repaired once: a lost
message is sent again once, an action near its global timeout is completed and sent on once, and an address is
released with no failure for the sweep that finds it gone."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import boto3

from nodecycle.domain.model import Step
from nodecycle.domain.sweep.sweeper import Counts
from nodecycle.wiring import sweeper as wiring
from tests.functions.intake.conftest import HEARTBEAT_TIMEOUT
from tests.functions.sweeper.test_sweeper_function import (
    OWNER,
    kept_to_the_end,
    record,
    store,
    under_a_hook_of,
)
from tests.support.stack import Stack, receive_all


def test_two_sweeps_at_once_repair_each_thing_once(sweeper: ModuleType, stack: Stack) -> None:
    # Given a lifecycle whose message was lost, one stuck near its action's global timeout, and an address of
    # this stack left unassociated for an hour
    now = datetime.now(UTC)
    lost = record(
        "i-0aaaaaaaaaaaaaaa1", Step.RELEASE_EIP, now - timedelta(minutes=5), now - timedelta(minutes=6)
    )
    lost = under_a_hook_of(lost, 3600)
    started = now - timedelta(seconds=HEARTBEAT_TIMEOUT * 100 - 60)
    stuck = kept_to_the_end(
        record("i-0aaaaaaaaaaaaaaa3", Step.RELEASE_EIP, started + timedelta(minutes=1), started)
    )
    for item in (lost, stuck):
        assert store(stack).create(item)
    tags: list[Any] = [
        {"Key": "nodecycle:owner", "Value": OWNER},
        {"Key": "nodecycle:allocated-at", "Value": (now - timedelta(hours=1)).isoformat()},
    ]
    ec2 = boto3.client("ec2")
    dangling = ec2.allocate_address(
        Domain="vpc", TagSpecifications=[{"ResourceType": "elastic-ip", "Tags": tags}]
    )["AllocationId"]

    # and two sweepers (two containers), each of which waits for the other once it has listed the open
    # lifecycles, and again once it has listed the addresses: both judge the same snapshot
    sweepers = [wiring.sweeper.__wrapped__(), wiring.sweeper.__wrapped__()]
    listed = {
        "Query": threading.Barrier(2, timeout=30),
        "DescribeAddresses": threading.Barrier(2, timeout=30),
    }
    waited: dict[tuple[int, str], bool] = {}

    def both_listed(model: Any, **_: Any) -> None:
        key = (threading.get_ident(), model.name)
        if model.name in listed and key not in waited:
            waited[key] = True
            listed[model.name].wait()

    events = boto3._get_default_session().events
    events.register("after-call.*.*", both_listed, unique_id="tests.BothListed")
    reports: list[Counts] = []
    errors: list[BaseException] = []

    def sweep(index: int) -> None:
        try:
            reports.append(sweepers[index].sweep(time_left=lambda: 300.0))
        except BaseException as error:  # (told to the test below)
            errors.append(error)

    # When both sweep at once
    threads = [threading.Thread(target=sweep, args=(index,)) for index in range(2)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    finally:
        events.unregister("after-call.*.*", unique_id="tests.BothListed")

    # Then both listed before either acted, neither failed, each lifecycle was repaired by one of them, and each message sent once
    assert len(waited) == 4
    assert errors == []
    assert sum(r["LifecyclesResumed"] for r in reports) == 1
    assert sum(r["LifecyclesSettled"] for r in reports) == 1
    messages = sorted(
        (json.loads(m["Body"])["record_id"], json.loads(m["Body"])["seq"])
        for m in receive_all(stack.eip_queue)
    )
    settled = store(stack).get(stuck.id)
    assert settled is not None
    assert settled.completed_at is not None
    assert messages == sorted([(lost.id, lost.seq + 1), (stuck.id, settled.seq)])
    # and the address is gone, with no failure for the sweep whose release EC2 answered NotFound, and counted
    # released by one of them: the other's release was answered NotFound at its first attempt (a lost answer is
    # told by botocore's retry; see Ec2Addresses.release)
    assert dangling not in {a["AllocationId"] for a in ec2.describe_addresses()["Addresses"]}
    assert sum(r["EipsReleasedBySweep"] for r in reports) == 1
