"""When a heartbeat renewed its action, as the caller can tell it (``Autoscaling.renewed_at``): FakeAutoscaling (the unit
tests') and AutoscalingActions on moto with the sandbox's lifecycle emulation answer alike.

Auto Scaling renews an action from when it takes the heartbeat, on its own clock, and its answer says when (its Date
header: to the second, stamped before the answer went out). A caller whose clock runs minutes ahead of Auto Scaling's
records the renewal as of that Date, not as of its own ``now``: the record's deadline is then never later than Auto
Scaling's (tests/unit/review/test_rcomplete_heartbeat_on_a_clock_ahead.py shows what a later one does). A caller on
time or behind records its own ``now``, read before the call, as before."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from tests.contracts.test_autoscaling import FakeSide, Side, emulation, named, side

__all__ = ["emulation", "side"]  # (the contract's fixtures: the fake, and the adapter on the emulation)

OFF = timedelta(minutes=4)


def auto_scalings_now(side: Side) -> datetime:
    """Auto Scaling's clock: the fake's own; the emulation's answers carry the machine's (moto's Date)."""
    return side.clock.now() if isinstance(side, FakeSide) else datetime.now(UTC)


def test_a_caller_ahead_of_auto_scaling_records_the_renewal_as_of_auto_scalings_answer(side: Side) -> None:
    held = side.hold()
    before = auto_scalings_now(side)
    assert side.port.heartbeat(held.action)
    after = auto_scalings_now(side)
    renewed = side.port.renewed_at(after + OFF)
    # (the Date is to the second: up to a second before the call)
    assert before - timedelta(seconds=1) <= renewed <= after


def test_a_caller_on_time_or_behind_records_its_own_now(side: Side) -> None:
    held = side.hold()
    behind = auto_scalings_now(side) - OFF
    assert side.port.heartbeat(held.action)
    assert side.port.renewed_at(behind) == behind


def test_a_heartbeat_refused_leaves_no_answer_of_an_earlier_one(side: Side) -> None:
    # Given a heartbeat accepted, then one naming an action Auto Scaling does not have
    held = side.hold()
    assert side.port.heartbeat(held.action)
    assert not side.port.heartbeat(named(held.action, token=str(uuid.uuid4())))
    # Then what the renewal is as of is the caller's own time: no earlier answer stands for the one refused
    ahead = auto_scalings_now(side) + OFF
    assert side.port.renewed_at(ahead) == ahead


@pytest.mark.parametrize("date", [None, "not a date", "Sun, 06 Dec 2026 14:42:40"])
def test_an_answer_that_does_not_tell_its_time_leaves_the_callers(date: str | None) -> None:
    from nodecycle.adapters.aws.clients import answered_at

    headers = {} if date is None else {"date": date}
    assert answered_at({"ResponseMetadata": {"HTTPHeaders": headers}}) is None
    assert answered_at({"ResponseMetadata": {"HTTPHeaders": {"date": "Sun, 06 Dec 2026 14:42:40 GMT"}}}) == (
        datetime(2026, 12, 6, 14, 42, 40, tzinfo=UTC)
    )
