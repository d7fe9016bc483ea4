"""The sweeper's Elastic IP part on moto, through the eip wiring, with EC2 denying the release of one address for
good (an explicit deny of a service control policy, or the role narrowed: UnauthorizedOperation, 403): it is told
once, tried again at its next try only, no sweep failing for it, and released once the deny is lifted."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from nodecycle.adapters.aws.address_lines import DynamoAddressLines
from nodecycle.domain.eip.locked import Lock
from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.ports.addresses import ALLOCATED_AT_TAG, INSTANCE_TAG, OWNER_TAG
from nodecycle.domain.sweep.sweep_time import SweepTime
from nodecycle.domain.sweep.sweeper import Counts, Sweeper, SweepFailed
from nodecycle.observability import metrics
from nodecycle.wiring import sweeper
from nodecycle.wiring.eip import address_sweep
from tests.functions.eip.conftest import AwsLikeEc2, addresses, allocate, api_calls, deny, ec2
from tests.support.emf import metric
from tests.support.fakes import FakeClock, FakeMetrics, InMemoryRecords
from tests.support.stack import Stack
from tests.unit.sweeper.test_orphans import AMPLE

__all__ = ["ec2"]  # (the AWS-like EC2 client fixture)

OWNER = "stack-a"  # the settings' owner id (tests/conftest.py)


def test_an_address_whose_release_is_denied_is_told_once_tried_again_later_and_released_once_allowed(
    stack: Stack, ec2: AwsLikeEc2, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an address left unassociated for an hour, whose release EC2 denies (UnauthorizedOperation)
    hour_ago = (datetime.now(UTC) - timedelta(hours=1)).isoformat(timespec="seconds")
    denied = allocate(**{OWNER_TAG: OWNER, INSTANCE_TAG: "i-0000000000000dead", ALLOCATED_AT_TAG: hour_ago})
    refusing = {denied}
    deny(ec2.moto, "ReleaseAddress", allocation_ids=refusing)
    calls = api_calls(ec2.moto)

    # When the sweeper runs three times in a row (its schedule, every few minutes)
    reports = [address_sweep(sweeper.settings(), sweeper.shared())(AMPLE) for _ in range(3)]

    # Then no sweep fails for it: it is told once (EipFailures, an error naming the address and EC2's answer), and
    # tried at the first sweep only, the address kept
    metrics.flush_metrics()
    out = capsys.readouterr().out
    assert metric(out, "EipFailures") == 1
    assert "UnauthorizedOperation" in out
    assert "EC2 refuses to free address" in out
    assert [report.kept for report in reports] == [1, 1, 1]
    assert calls["ReleaseAddress"] == 1

    # And the refusal is remembered as one (not a lock) in the table
    lines = DynamoAddressLines(stack.table)
    read = lines.locks(OWNER)
    assert read.by[denied].refused
    assert read.by[denied].tries == 1

    # And once the deny is lifted, the sweep that comes at its next try releases it: nothing leaks
    refusing.clear()
    due = {denied: replace(read.by[denied], next_try=datetime.now(UTC))}
    assert lines.keep_locks(OWNER, due, read.version)
    assert lines.locks(OWNER).by[denied].refused  # (read back as written)
    assert address_sweep(sweeper.settings(), sweeper.shared())(AMPLE).released == 1
    assert addresses() == []


def test_the_association_a_refusal_is_of_is_read_back_as_written(stack: Stack) -> None:
    # Given a disassociation refused (of one association), and a release refused, remembered in the table
    lines = DynamoAddressLines(stack.table)
    now = datetime.now(UTC).replace(microsecond=0)
    kept = {
        "eipalloc-1": Lock(since=now, tries=2, next_try=now, refused=True, association="eipassoc-1"),
        "eipalloc-2": Lock(since=now, tries=1, next_try=now, refused=True),
    }

    # When they are written and read back
    assert lines.keep_locks(OWNER, kept, 0)

    # Then each reads as written: the association's refusal holds back that association's end only
    assert dict(lines.locks(OWNER).by) == kept


def test_a_listing_of_the_addresses_denied_to_the_sweepers_role_is_told_as_the_part_aws_refused(
    stack: Stack, ec2: AwsLikeEc2, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a sweeper's role EC2 denies DescribeAddresses (the role narrowed, a service control policy)
    deny(ec2.moto, "DescribeAddresses")
    swept = address_sweep(sweeper.settings(), sweeper.shared())

    def addresses_part(open_records: Sequence[LifecycleRecord], now: datetime, time: SweepTime) -> Counts:
        swept(time)
        return {}

    counted = FakeMetrics()
    sweep = Sweeper(
        owner=OWNER,
        records=InMemoryRecords(),
        clock=FakeClock(),
        metrics=counted,
        parts={"addresses": addresses_part},
        shares={},
    )

    # When the sweep runs
    with (
        caplog.at_level(logging.INFO),
        pytest.raises(SweepFailed, match="refused calls to the sweeper's role in: addresses"),
    ):
        sweep.sweep(time_left=lambda: 300)

    # Then the part is told refused, as any other part AWS refuses: named, counted, with no traceback
    assert counted.counts["SweepPartsRefused[part=addresses]"] == 1
    told = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("UnauthorizedOperation" in message and "addresses" in message for message in told), told
    assert not [r for r in caplog.records if r.exc_info is not None]
