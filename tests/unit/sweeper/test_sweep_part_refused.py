"""A part of the sweep whose calls AWS refuses to the sweeper's role (AccessDenied: the role narrowed, a service
control policy) is told once per sweep, clearly: one error naming the part, the call, the code and AWS's words
(which name the principal refused), and ``SweepPartsRefused{part}``; not a traceback per node or lifecycle it met it
for, whose cause an operator had to dig out of each. The other parts run (nodecycle.domain.sweep.sweeper)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

import pytest

from nodecycle.domain.errors import AccessRefused
from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.sweep.annotations import LeftoverAnnotations
from nodecycle.domain.sweep.sweep_time import SweepTime
from nodecycle.domain.sweep.sweeper import Counts, Sweeper, SweepFailed
from tests.support.fakes import FakeClock, FakeMetrics, InMemoryRecords
from tests.unit.sweeper.test_sweeper import FakeNodes, annotated

DENIED = (
    "User: arn:aws:sts::123456789012:assumed-role/stack-a-SweeperFunctionRole/sweeper is not authorized to perform: "
    "dynamodb:GetItem with an explicit deny in a service control policy"
)


class DeniedRecords(InMemoryRecords):
    """DynamoDB refusing the sweeper's reads of a record (GetItem), as a service control policy does."""

    def get(self, record_id: str) -> LifecycleRecord | None:
        raise AccessRefused("reading a lifecycle record", "AccessDeniedException", DENIED)


def test_a_part_aws_refuses_is_told_once_naming_the_part_the_call_and_the_refusal_not_a_traceback_per_node(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given three nodes left annotated by this owner, whose lifecycle records the sweeper may not read, and a part
    # after them that AWS serves
    nodes = FakeNodes([annotated(f"n{n}", "stack-a", f"i-0aaaaaaaaaaaaaaa{n}", f"t{n}") for n in range(3)])
    metrics = FakeMetrics()
    ran: list[str] = []

    def addresses(open_records: Sequence[LifecycleRecord], now: datetime, time: SweepTime) -> Counts:
        ran.append("addresses")
        return {}

    sweeper = Sweeper(
        owner="stack-a",
        records=InMemoryRecords(),
        clock=FakeClock(),
        metrics=metrics,
        parts={
            "annotations": LeftoverAnnotations(
                owner="stack-a", cluster=nodes, records=DeniedRecords(), metrics=metrics
            ),
            "addresses": addresses,
        },
        shares={},
    )

    # When the sweep runs
    with caplog.at_level(logging.INFO), pytest.raises(SweepFailed, match="annotations") as failed:
        sweeper.sweep(time_left=lambda: 300)

    # Then the other part ran, the annotations were kept, and the sweep fails naming the part refused
    assert ran == ["addresses"]
    assert nodes.released == []
    assert "refused" in str(failed.value)
    # And the refusal is told once, as an error naming the part, the call, the code and AWS's words, and counted
    # for the part
    told = [
        r for r in caplog.records if r.levelno >= logging.ERROR and "AccessDeniedException" in r.getMessage()
    ]
    assert len(told) == 1, [r.getMessage() for r in told]
    (error,) = told
    for words in ("annotations", "reading a lifecycle record", "AccessDeniedException", DENIED, "3"):
        assert words in error.getMessage()
    assert metrics.counts["SweepPartsRefused[part=annotations]"] == 1
    # And no traceback is logged for a refusal
    assert not [r for r in caplog.records if r.exc_info is not None]
