"""Pool mode under contention, on moto: 20 launches racing for 10 pool addresses at the same moment.

Each launch runs ASSIGN_EIP in its own thread with its own boto3 client against moto's one in-process EC2.
moto honours AllowReassociation=false (``Resource.AlreadyAssociated``) but checks and associates in two steps
that threads can interleave, where AWS decides atomically: the AwsLikeEc2 of conftest.py serializes
AssociateAddress on a shared lock, as AWS would. Every launch lists the pool before any of them associates
(a barrier), so the claims do collide and the refusals are exercised, not just possible.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import boto3

from nodecycle.adapters.aws.addresses import Ec2Addresses
from nodecycle.domain.eip.assign import AssignAddress
from nodecycle.domain.engine import Outcome
from nodecycle.domain.ports.addresses import OWNER_TAG, POOL_TAG
from nodecycle.settings import EipSettings
from nodecycle.wiring.common import eip_policy
from tests.functions.eip.conftest import AwsLikeEc2, addresses, allocate, run_instances
from tests.support.fakes import FakeMetrics
from tests.support.stack import Stack
from tests.unit.eip.fakes import launch_record

LAUNCHES = 20
POOL_SIZE = 10


class ListsTogether(AwsLikeEc2):
    """Holds each launch after its pool listing until every launch has listed the pool."""

    def __init__(self, ec2: Any, lock: threading.Lock, barrier: threading.Barrier) -> None:
        super().__init__(ec2, lock=lock)
        self._barrier = barrier

    def describe_addresses(self, **kwargs: Any) -> Any:
        found = self.moto.describe_addresses(**kwargs)
        if any(item["Name"] == f"tag:{POOL_TAG}" for item in kwargs.get("Filters", [])):
            self._barrier.wait(timeout=30)
        return found


def test_twenty_launches_racing_for_ten_pool_addresses_take_each_once_and_steal_none(stack: Stack) -> None:
    # Given a pool of 10 free addresses of this stack and 20 instances launching at once
    pool = {allocate(**{OWNER_TAG: "stack-a", POOL_TAG: "ci"}) for _ in range(POOL_SIZE)}
    instances = run_instances(LAUNCHES)
    settings = EipSettings.model_validate(
        {
            "owner_id": "stack-a",
            "record_table": stack.table,
            "drain_queue_url": stack.drain_queue,
            "eip_queue_url": stack.eip_queue,
            "wake_queue_url": stack.wake_queue,
            "managed_groups": "ci-runners",
            "eip_mode": "pool",
            "eip_pool_name": "ci",
        }
    )
    lock, barrier = threading.Lock(), threading.Barrier(LAUNCHES)
    clients = [ListsTogether(boto3.client("ec2"), lock, barrier) for _ in range(LAUNCHES)]

    def launch(number: int) -> Outcome:
        step = AssignAddress(
            owner="stack-a",
            policy=eip_policy(settings),
            addresses=Ec2Addresses(clients[number]),  # type: ignore[arg-type]  # a wrapped moto client
            metrics=FakeMetrics(),
        )
        return step(launch_record(instances[number]), datetime.now(UTC))

    # When they all claim an address
    with ThreadPoolExecutor(max_workers=LAUNCHES) as threads:
        outcomes = dict(zip(instances, threads.map(launch, range(LAUNCHES)), strict=True))

    # Then each pool address went to exactly one launch, and EC2 holds it where that launch says
    winners = {i: o.changes["allocation_id"] for i, o in outcomes.items() if o.then is None and not o.again}
    assert sorted(winners.values()) == sorted(pool)
    held = {a["AllocationId"]: a.get("InstanceId") for a in addresses(**{f"tag:{POOL_TAG}": "ci"})}
    assert held == {allocation: instance for instance, allocation in winners.items()}
    # And the other ten found the pool empty: they look again later, for an address given back
    losers = [o for i, o in outcomes.items() if i not in winners]
    assert len(losers) == LAUNCHES - POOL_SIZE
    assert all(o.again and "allocation_id" not in o.changes for o in losers)
    assert all(o.changes["extra"]["eip"]["exhausted"] == 1 for o in losers)
    # And no address was ever moved: one association each, the collisions refused
    associations = [made for client in clients for made in client.associations]
    assert sorted(allocation for allocation, _ in associations) == sorted(pool)
    refused = sum(client.refusals["Resource.AlreadyAssociated"] for client in clients)
    assert refused >= (LAUNCHES - POOL_SIZE) * POOL_SIZE  # every loser was refused every address
