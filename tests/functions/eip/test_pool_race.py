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
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3

from nodecycle.adapters.aws.address_lines import DynamoAddressLines
from nodecycle.adapters.aws.addresses import Ec2Addresses
from nodecycle.adapters.aws.autoscaling import AutoscalingActions
from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle.domain.eip.assign import AssignAddress
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.ports.addresses import OWNER_TAG, POOL_TAG
from nodecycle.settings import EipSettings
from nodecycle.wiring.common import eip_policy
from tests.functions.eip.conftest import AwsLikeEc2, addresses, allocate, run_instances, store
from tests.support.fakes import FakeMetrics
from tests.support.stack import Stack
from tests.unit.eip.fakes import launch_record

LAUNCHES = 20
POOL_SIZE = 10


class ListsTogether(AwsLikeEc2):
    """Holds each launch after its first pool listing until every launch has listed the pool (a launch that
    joins the line lists it again: that one goes through)."""

    def __init__(self, ec2: Any, lock: threading.Lock, barrier: threading.Barrier) -> None:
        super().__init__(ec2, lock=lock)
        self._barrier = barrier
        self._listed = False

    def describe_addresses(self, **kwargs: Any) -> Any:
        found = self.moto.describe_addresses(**kwargs)
        if not self._listed and any(item["Name"] == f"tag:{POOL_TAG}" for item in kwargs.get("Filters", [])):
            self._listed = True
            self._barrier.wait(timeout=30)
        return found


def wired(stack: Stack, settings: EipSettings, ec2: AwsLikeEc2) -> AssignAddress:
    """ASSIGN_EIP as the eip function wires it (nodecycle.wiring.eip), with clients of its own (each Lambda
    has its own): the pool's line and the lifecycle records on the stack's table."""
    return AssignAddress(
        owner="stack-a",
        policy=eip_policy(settings),
        addresses=Ec2Addresses(ec2),  # type: ignore[arg-type]  # a wrapped moto client
        metrics=FakeMetrics(),
        lines=DynamoAddressLines(stack.table, boto3.client("dynamodb")),
        records=DynamoRecordStore(stack.table, ttl=timedelta(days=14), dynamodb=boto3.client("dynamodb")),
        groups=AutoscalingActions(boto3.client("autoscaling")),
    )


def pool_settings(stack: Stack) -> EipSettings:
    """The eip function's settings for stack-a's pool "ci" on ``stack``."""
    return EipSettings.model_validate(
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


def test_twenty_launches_racing_for_ten_pool_addresses_take_each_once_steal_none_and_the_others_wait_in_line(
    stack: Stack,
) -> None:
    # (One race for both: each pool address taken once, and the launches left without one waiting in the pool's
    # line. Two tests ran the same race of twenty threads on moto, a third of the file's time, each.)
    # Given a pool of 10 free addresses of this stack, 20 instances launching at once, and the pool's line on
    # the lifecycle table (each launch with its own DynamoDB client, as each Lambda has)
    pool = {allocate(**{OWNER_TAG: "stack-a", POOL_TAG: "ci"}) for _ in range(POOL_SIZE)}
    instances = run_instances(LAUNCHES)
    settings = pool_settings(stack)
    lock, barrier = threading.Lock(), threading.Barrier(LAUNCHES)
    clients = [ListsTogether(boto3.client("ec2"), lock, barrier) for _ in range(LAUNCHES)]
    started = datetime.now(UTC)

    def launch(number: int, record: LifecycleRecord, now: datetime) -> Outcome:
        return wired(stack, settings, clients[number])(record, now)

    # When they all claim an address
    records = [launch_record(instance) for instance in instances]
    for record in records:
        assert store(stack).create(record)
    with ThreadPoolExecutor(max_workers=LAUNCHES) as threads:
        outcomes = list(threads.map(launch, range(LAUNCHES), records, [started] * LAUNCHES))

    # Then each pool address went to exactly one launch, and EC2 holds it where that launch says
    winners = [n for n, o in enumerate(outcomes) if o.then is None and not o.again]
    losers = [n for n, o in enumerate(outcomes) if o.again]
    assert sorted(outcomes[n].changes["allocation_id"] for n in winners) == sorted(pool)
    held = {a["AllocationId"]: a.get("InstanceId") for a in addresses(**{f"tag:{POOL_TAG}": "ci"})}
    assert held == {outcomes[n].changes["allocation_id"]: instances[n] for n in winners}
    # And the other ten found the pool empty: they look again later, for an address given back
    assert sorted(losers) == sorted(set(range(LAUNCHES)) - set(winners))
    assert len(losers) == LAUNCHES - POOL_SIZE
    assert all("allocation_id" not in outcomes[n].changes for n in losers)
    assert all(outcomes[n].changes["extra"]["eip"]["exhausted"] == 1 for n in losers)
    # And no address was ever moved: one association each, the collisions refused
    associations = [made for client in clients for made in client.associations]
    assert sorted(allocation for allocation, _ in associations) == sorted(pool)
    refused = sum(client.refusals["Resource.AlreadyAssociated"] for client in clients)
    assert refused >= (LAUNCHES - POOL_SIZE) * POOL_SIZE  # every loser was refused every address
    # And once each has looked again (a join whose writes all lost the race is made at the next look), the
    # ten wait in the pool's line, in the order they first found the pool empty, and no winner is in it
    barrier_free = threading.Barrier(1)
    for client in clients:
        client._barrier = barrier_free  # (the second looks need not list together)
    later = started + timedelta(seconds=15)
    for n in losers:
        record = records[n].model_copy(update=dict(outcomes[n].changes))
        assert launch(n, record, later).again
    line = DynamoAddressLines(stack.table).read("stack-a/ci")
    assert sorted(waiter.instance_id for waiter in line.waiters) == sorted(instances[n] for n in losers)
    assert list(line.waiters) == sorted(line.waiters)


def test_twenty_launches_finding_the_pool_empty_at_once_get_the_addresses_given_back_in_the_order_they_came(
    stack: Stack,
) -> None:
    # Given a pool of 3 addresses, all held by old instances, and 20 instances launching at once, a millisecond
    # apart: each lists the pool before any joins its line, so all 20 join it at once (conditional writes
    # racing, each launch with its own clients)
    old = run_instances(3)
    ec2: Any = boto3.client("ec2")
    pool = [allocate(**{OWNER_TAG: "stack-a", POOL_TAG: "ci"}) for _ in old]
    associations = [
        ec2.associate_address(AllocationId=address, InstanceId=instance, AllowReassociation=False)[
            "AssociationId"
        ]
        for address, instance in zip(pool, old, strict=True)
    ]
    instances = run_instances(LAUNCHES)
    settings = pool_settings(stack)
    lock, barrier = threading.Lock(), threading.Barrier(LAUNCHES)
    clients = [ListsTogether(boto3.client("ec2"), lock, barrier) for _ in range(LAUNCHES)]
    steps = [wired(stack, settings, client) for client in clients]
    started = datetime.now(UTC)
    records = [launch_record(instance, at=started) for instance in instances]
    for record in records:
        assert store(stack).create(record)
    came = [started + timedelta(milliseconds=n) for n in range(LAUNCHES)]
    with ThreadPoolExecutor(max_workers=LAUNCHES) as threads:
        outcomes = list(threads.map(lambda n: steps[n](records[n], came[n]), range(LAUNCHES)))
    assert all(outcome.again for outcome in outcomes)
    for client in clients:
        client._barrier = threading.Barrier(1)  # (the later looks need not list together)

    # When the old instances give their addresses back, at 30 s, 90 s and 150 s, and every launch looks again
    # when it asked to, for 4 minutes
    looks = [(came[n] + timedelta(seconds=outcomes[n].delay), n) for n in range(LAUNCHES)]
    records = [r.model_copy(update=dict(o.changes)) for r, o in zip(records, outcomes, strict=True)]
    returns = [started + timedelta(seconds=s) for s in (30, 90, 150)]
    served: list[tuple[int, datetime]] = []
    while looks:
        now, n = min(looks)
        looks.remove((now, n))
        if now > started + timedelta(minutes=4):
            continue
        while returns and returns[0] <= now:
            returns.pop(0)
            ec2.disassociate_address(AssociationId=associations.pop(0))
        outcome = steps[n](records[n], now)
        records[n] = records[n].model_copy(update=dict(outcome.changes))
        if outcome.again:
            looks.append((now + timedelta(seconds=outcome.delay), n))
        else:
            served.append((n, now))

    # Then the three addresses went to the three launches that came first, in their order, each within 15 s of
    # its return; the other 17 wait in the line, in the order they came
    assert [n for n, _ in served] == [0, 1, 2]
    for (_, taken), back in zip(served, (30, 90, 150), strict=True):
        assert timedelta(0) <= taken - (started + timedelta(seconds=back)) <= timedelta(seconds=15)
    line = DynamoAddressLines(stack.table).read("stack-a/ci")
    assert [waiter.instance_id for waiter in line.waiters] == instances[3:]
