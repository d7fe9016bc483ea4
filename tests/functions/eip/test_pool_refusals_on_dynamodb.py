"""The addresses refused to a pool's line (PoolRefusals) on moto's DynamoDB, the lifecycle table, written by
launches of the pool at the same moment: each writes the item over what it read. Two launches refused an address
each, each reading the item before the other wrote it, kept one refusal: the later write dropped the earlier
launch's (a lost update), and the waiters behind counted that address free again. Each write is now made only over
the version read, and made again over a fresh read when another came first."""

from __future__ import annotations

from datetime import UTC, datetime

import boto3

from nodecycle.adapters.aws.address_lines import DynamoAddressLines
from nodecycle.domain.eip.line import PoolRefusals, Refused
from tests.support.stack import Stack

KEY = "stack-a/ci"


class ReadBeforeAnotherWrites(DynamoAddressLines):
    """The item, read once another launch's whole refusal lands between this launch's read and its write."""

    def __init__(self, table: str, another: PoolRefusals, refused: str, now: datetime) -> None:
        super().__init__(table)
        self._another: tuple[PoolRefusals, str, datetime] | None = (another, refused, now)

    def refusals(self, key: str) -> Refused:
        read = super().refusals(key)
        if self._another is not None:
            another, refused, now = self._another
            self._another = None
            another.add([refused], "i-000000000000000b2", now)
        return read


def test_two_launches_refused_at_once_keep_both_refusals(stack: Stack) -> None:
    # Given two launches of a pool refused an address each at the same moment, one reading the item before the
    # other writes it
    now = datetime.now(UTC).replace(microsecond=0)
    other = PoolRefusals(DynamoAddressLines(stack.table), KEY)
    racing = PoolRefusals(ReadBeforeAnotherWrites(stack.table, other, "eipalloc-0002", now), KEY)

    # When both tell the line
    racing.add(["eipalloc-0001"], "i-000000000000000a1", now)

    # Then the line is told both
    assert PoolRefusals(DynamoAddressLines(stack.table), KEY).read(now) == {"eipalloc-0001", "eipalloc-0002"}


def test_an_item_of_the_first_writers_is_read_as_none_and_written_over(stack: Stack) -> None:
    # Given the item as the first writers kept it (one time an address, no version), a deploy ago
    now = datetime.now(UTC).replace(microsecond=0)
    boto3.client("dynamodb").put_item(
        TableName=stack.table,
        Item={"id": {"S": f"eip-refused#{KEY}"}, "refused": {"M": {"eipalloc-0009": {"S": now.isoformat()}}}},
    )
    refusals = PoolRefusals(DynamoAddressLines(stack.table), KEY)

    # When a launch tells the line of a refusal
    assert refusals.read(now) == frozenset()
    refusals.add(["eipalloc-0001"], "i-000000000000000a1", now)

    # Then it is told (the item written over)
    assert refusals.read(now) == {"eipalloc-0001"}
