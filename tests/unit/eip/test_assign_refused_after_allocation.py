"""ASSIGN_EIP when EC2 refuses the association for a reason no retry soon changes (a denial, a subnet without an
internet gateway) right after the launch allocated its address. The launch remembers what it allocated only in its
scratch; the refusal's wait is asked again 15 s later, and EC2 lists a new address only seconds to a minute after
its allocation under load (its reads lag its writes: "eventual consistency", the EC2 API reference)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

import pytest

from nodecycle.domain.eip.assign import REFUSED_ATTEMPTS
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.ports.addresses import POOL_TAG, Address, AddressRefused
from nodecycle.settings import EipSettings
from nodecycle.wiring.common import eip_policy
from tests.support.fakes import FakeMetrics
from tests.unit.eip.fakes import GROUP, OWNER, T0, FakeAddresses, Wiring, launch_record

INSTANCE = "i-0123456789abcdef0"
POOL = "ci"


def settings(**overrides: str) -> EipSettings:
    return EipSettings.model_validate(
        {
            "owner_id": OWNER,
            "record_table": "records",
            "drain_queue_url": "https://sqs.example/drain",
            "eip_queue_url": "https://sqs.example/eip",
            "wake_queue_url": "https://sqs.example/wake",
            "managed_groups": GROUP,
            "eip_mode": "allocate",
            **overrides,
        }
    )


@pytest.mark.parametrize(
    "overrides",
    [{}, {"eip_mode": "pool", "eip_pool_name": POOL, "eip_pool_allocate_when_empty": "true"}],
    ids=["allocate", "pool-that-grows"],
)
def test_an_association_refused_right_after_an_allocation_allocates_no_second_address(
    monkeypatch: pytest.MonkeyPatch, overrides: dict[str, str]
) -> None:
    # Given EC2 that lists a new address only a minute after its allocation, and refuses the first association
    # (a denial: IAM still propagating after a stack update), then associates
    ec2, metrics, wiring = FakeAddresses(), FakeMetrics(), Wiring()
    ec2.launch(INSTANCE)
    ec2.faults["associate"].append(AddressRefused("UnauthorizedOperation"))
    allocated_at: dict[str, float] = {}
    now = [T0.timestamp()]
    allocate, find = ec2.allocate, ec2.find

    def allocating(tags: Mapping[str, str]) -> Address:
        address = allocate(tags)
        allocated_at[address.allocation_id] = now[0]
        return address

    def lagging(owner: str, **filters: str | None) -> list[Address]:
        return [a for a in find(owner, **filters) if allocated_at.get(a.allocation_id, 0) <= now[0] - 60]

    monkeypatch.setattr(ec2, "allocate", allocating)
    monkeypatch.setattr(ec2, "find", lagging)
    assign = wiring.assign(ec2, metrics, eip_policy(settings(**overrides)))

    # When the step runs as the engine runs it, each wait's record committed, until the launch goes on
    record: LifecycleRecord = launch_record(INSTANCE)
    outcome: Outcome | None = None
    for _ in range(REFUSED_ATTEMPTS * 4):
        outcome = assign(record, datetime.fromtimestamp(now[0], UTC))
        if outcome.then is not None or not outcome.again:
            break
        record = record.model_copy(update={**outcome.changes, "seq": record.seq + 1})
        now[0] += outcome.delay

    # Then the launch holds the one address it allocated: none allocated a second time for an allocation the
    # refusal's wait forgot (left unassociated for the sweeper; a pool grown by two, for good)
    assert outcome is not None
    assert outcome.then is None
    assert not outcome.again
    assert ec2.count("allocate") == 1
    assert [eip.allocation_id for eip in ec2.on(INSTANCE)] == list(ec2.eips)
    if overrides:
        assert all(eip.tags.get(POOL_TAG) == POOL for eip in ec2.eips.values())
