"""The pool address a launch left its instance holding (``DynamoAddressLines.hold`` and ``held``) on moto's
DynamoDB, the lifecycle table: kept per owner and instance, the latest over any earlier, read consistently, not
read once over a day old (the table's TTL deletes an item late)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nodecycle.adapters.aws.address_lines import KEPT, DynamoAddressLines
from nodecycle.domain.eip.line import Held
from tests.support.stack import Stack

INSTANCE = "i-0123456789abcdef0"


def held(allocation_id: str, at: datetime) -> Held:
    return Held(allocation_id, f"eipassoc-{allocation_id[-4:]}", "198.51.100.7", "ci", at)


def test_the_latest_held_address_is_the_one_read_per_owner_and_instance(stack: Stack) -> None:
    lines = DynamoAddressLines(stack.table)
    now = datetime.now(UTC).replace(microsecond=0)
    assert lines.held("stack-a", INSTANCE) is None
    lines.hold("stack-a", INSTANCE, held("eipalloc-aaaa", now - timedelta(minutes=5)))
    lines.hold("stack-a", INSTANCE, held("eipalloc-bbbb", now))

    assert lines.held("stack-a", INSTANCE) == held("eipalloc-bbbb", now)
    assert lines.held("stack-b", INSTANCE) is None
    assert lines.held("stack-a", "i-0000000000000bbbb") is None


def test_a_held_address_over_a_day_old_is_not_read(stack: Stack) -> None:
    lines = DynamoAddressLines(stack.table)
    lines.hold("stack-a", INSTANCE, held("eipalloc-aaaa", datetime.now(UTC) - KEPT - timedelta(minutes=1)))

    assert lines.held("stack-a", INSTANCE) is None
