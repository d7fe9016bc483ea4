"""The eip memories that decide what a launch or a sweep does next (the pool's told refusals, the addresses AWS
locked) are read consistently: under the sandbox's DynamoDB lag (an eventually consistent read sees an item as it
was before the writes not copied yet), a launch reads the refusal told a moment before, and a sweep the lock
remembered, never the older copy. Each write lands only over the version read."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from nodecycle.adapters.aws.address_lines import DynamoAddressLines
from nodecycle.domain.eip.line import PoolRefusals, line_key
from nodecycle.domain.eip.locked import Lock
from nodecycle_sandbox.aws import install
from nodecycle_sandbox.aws.dynamodb_index_lag import LAG
from tests.support.stack import Stack
from tests.unit.eip.fakes import OWNER, T0

ADDRESS = "eipalloc-0123456789abcdef0"


@pytest.fixture
def lines(stack: Stack) -> Iterator[DynamoAddressLines]:
    install()  # the sandbox's DynamoDB: its eventually consistent reads can lag
    with LAG.held(stack.table):
        yield DynamoAddressLines(stack.table)
    LAG.disarm()


def test_a_refusal_told_a_moment_before_is_read_by_the_next_launch(lines: DynamoAddressLines) -> None:
    # Given two launches refused an address of the pool, told one after the other while the table's copies lag
    refusals = PoolRefusals(lines, line_key(OWNER, "ci"))
    refusals.add([ADDRESS], "i-00000000000other1", T0)
    refusals.add([ADDRESS], "i-00000000000other2", T0)

    # When the next launch reads the refusals, Then it reads both (the address refused to two launches)
    assert refusals.read_both(T0 + timedelta(seconds=1)) == (frozenset({ADDRESS}), frozenset({ADDRESS}))


def test_a_lock_remembered_a_moment_before_is_read_and_a_stale_write_does_not_land(
    lines: DynamoAddressLines,
) -> None:
    # Given a lock remembered while the table's copies lag
    lock = Lock(since=T0, tries=1, next_try=T0 + timedelta(minutes=15))
    assert lines.keep_locks(OWNER, {ADDRESS: lock}, 0)

    # When it is read, Then it is there, at its version; a writer that read nothing before cannot write over it
    assert lines.locks(OWNER).by == {ADDRESS: lock}
    assert lines.locks(OWNER).version == 1
    assert not lines.keep_locks(OWNER, {}, 0)
    assert lines.locks(OWNER).by == {ADDRESS: lock}
