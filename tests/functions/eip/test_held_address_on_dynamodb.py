"""The pool address a launch left its instance holding (``DynamoAddressLines.hold`` and ``held``) on moto's
DynamoDB, the lifecycle table: kept per owner and instance, the latest over any earlier, read consistently, not
read once a day old (the table's TTL deletes an item late). The address offered to a waiter woken for it
(``offer`` and ``offered``) is kept by the same pair, to the same boundary."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from nodecycle.adapters.aws import address_lines
from nodecycle.adapters.aws.address_lines import KEPT, DynamoAddressLines
from nodecycle.domain.eip.line import MAX_POOL_REFUSALS, REFUSED_FOR, Held, PoolRefusals
from nodecycle.domain.eip.wake import Offer
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


@pytest.mark.parametrize("kept", ["held", "offered"])
def test_a_kept_address_is_read_until_a_day_after_its_time_and_not_from_then_on(
    stack: Stack, kept: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an address kept for an instance (held) or offered to a waiter, and a clock at its day's end
    lines = DynamoAddressLines(stack.table)
    at = datetime(2026, 3, 1, 12, 0, 0, 500_000, tzinfo=UTC)
    if kept == "held":
        lines.hold("stack-a", INSTANCE, held("eipalloc-aaaa", at))
    else:
        lines.offer(
            "stack-a/ci", "lifecycle-1", Offer("ci", "eipalloc-aaaa", "198.51.100.7", "eipassoc-1", at)
        )

    def read_at(moment: datetime) -> object:
        monkeypatch.setattr(address_lines, "_now", lambda: moment)
        if kept == "held":
            return lines.held("stack-a", INSTANCE)
        return lines.offered("stack-a/ci", "lifecycle-1")

    # Then both reads agree on one boundary: read a moment before at + KEPT, not at it (the TTL's expiry)
    assert read_at(at + KEPT - timedelta(microseconds=1)) is not None
    assert read_at(at + KEPT) is None


def test_the_addresses_refused_to_a_line_are_told_per_line_and_bounded(stack: Stack) -> None:
    # (PoolRefusals over DynamoAddressLines.refusals and keep_refusals: the latest MAX_POOL_REFUSALS, REFUSED_FOR)
    lines = DynamoAddressLines(stack.table)
    refusals = PoolRefusals(lines, "stack-a/ci")
    now = datetime.now(UTC).replace(microsecond=0)
    assert refusals.read(now) == frozenset()
    refusals.add(["eipalloc-old"], "i-0000000000000000a", now - REFUSED_FOR)
    # (each refused to two launches: one launch refused more than BELIEVED_ALONE addresses is not believed alone)
    for instance in ("i-0000000000000000a", "i-0000000000000000b"):
        refusals.add([f"eipalloc-{n:04d}" for n in range(MAX_POOL_REFUSALS + 5)], instance, now)

    told = refusals.read(now)
    assert len(told) == MAX_POOL_REFUSALS
    assert "eipalloc-old" not in told
    assert PoolRefusals(lines, "stack-a/other").read(now) == frozenset()
    assert refusals.read(now + REFUSED_FOR) == frozenset()
