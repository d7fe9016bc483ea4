"""ASSIGN_EIP when the write of the address a launch's deliveries take (``AddressLines.taking``, a DynamoDB
PutItem) fails right after the launch allocated its address: throttled, or its answer lost past botocore's
retries. The launch remembers what it allocated only in its scratch, which a step that raises never commits;
and EC2 lists a new address only seconds later under load."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

import pytest

from nodecycle.domain.engine import Outcome
from nodecycle.domain.errors import AccessRefused, TransientError
from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.ports.addresses import Address
from nodecycle.settings import EipSettings
from nodecycle.wiring.common import eip_policy
from tests.support.fakes import FakeMetrics
from tests.unit.eip.fakes import GROUP, OWNER, T0, FakeAddresses, Wiring, launch_record

INSTANCE = "i-0123456789abcdef0"


def settings() -> EipSettings:
    return EipSettings.model_validate(
        {
            "owner_id": OWNER,
            "record_table": "records",
            "drain_queue_url": "https://sqs.example/drain",
            "eip_queue_url": "https://sqs.example/eip",
            "wake_queue_url": "https://sqs.example/wake",
            "managed_groups": GROUP,
            "eip_mode": "allocate",
        }
    )


def went_on(outcome: Outcome) -> bool:
    return outcome.then is None and not outcome.again


def test_a_throttled_write_of_the_address_taken_right_after_an_allocation_allocates_no_second_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given EC2 that lists a new address only a minute after its allocation (its reads lag its writes), and
    # DynamoDB throttling the write of the address the launch takes, right after the launch allocated it
    ec2, metrics, wiring = FakeAddresses(), FakeMetrics(), Wiring()
    ec2.launch(INSTANCE)
    allocated_at: dict[str, int] = {}
    clock = [T0]
    allocate, find = ec2.allocate, ec2.find

    def allocating(tags: Mapping[str, str]) -> Address:
        address = allocate(tags)
        allocated_at[address.allocation_id] = int(clock[0].timestamp())
        return address

    def lagging(owner: str, **filters: str | None) -> list[Address]:
        shown = int(clock[0].timestamp()) - 60
        return [a for a in find(owner, **filters) if allocated_at.get(a.allocation_id, shown) <= shown]

    monkeypatch.setattr(ec2, "allocate", allocating)
    monkeypatch.setattr(ec2, "find", lagging)
    throttled = [TransientError("ProvisionedThroughputExceededException")]
    taking = wiring.lines.taking

    def throttling(run: str, allocation_id: str, instead_of: str | None) -> str:
        if throttled:
            raise throttled.pop()
        return taking(run, allocation_id, instead_of)

    monkeypatch.setattr(wiring.lines, "taking", throttling)
    assign = wiring.assign(ec2, metrics, eip_policy(settings()))

    # When the step runs as the engine runs it (a step that raises is retried on the record as it was, a second
    # later), until the launch goes on
    record: LifecycleRecord = launch_record(INSTANCE)
    outcome: Outcome | None = None
    for _ in range(20):
        try:
            outcome = assign(record, clock[0])
        except TransientError:
            clock[0] += timedelta(seconds=1)
            continue
        if went_on(outcome):
            break
        record = record.model_copy(update={**outcome.changes, "seq": record.seq + 1})
        clock[0] += timedelta(seconds=outcome.delay)

    # Then the launch went on with the one address it allocated: none allocated a second time for an allocation
    # the throttled step forgot, left unassociated for the sweeper
    assert outcome is not None
    assert went_on(outcome)
    assert ec2.count("allocate") == 1
    assert [eip.allocation_id for eip in ec2.on(INSTANCE)] == list(ec2.eips)


def test_a_refused_write_of_the_address_taken_is_the_engines_to_report_not_waited_on() -> None:
    # Given the role refused the write (AccessDenied: a policy edited), right after the launch allocated its address
    ec2, metrics, wiring = FakeAddresses(), FakeMetrics(), Wiring()
    ec2.launch(INSTANCE)

    def refusing(run: str, allocation_id: str, instead_of: str | None) -> str:
        raise AccessRefused("writing the address a launch takes", "AccessDeniedException", "not authorized")

    wiring.lines.taking = refusing  # type: ignore[method-assign]

    # When the step runs, Then the refusal goes to the engine, which tells it and retries it only so often
    with pytest.raises(AccessRefused):
        wiring.assign(ec2, metrics, eip_policy(settings()))(launch_record(INSTANCE), T0)
