"""AWS Health's updates of a scheduled change: Health sends its event again, under a new id, whenever it updates it,
and once more when the event's status becomes ``closed`` (``detail.statusCode``: ``upcoming``, ``open``,
``closed``): the maintenance is over, or called off. The samples of the other intake tests carry no status; these
tests send what Health sends at the end of a maintenance."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import pytest

from tests.functions.intake.test_disruption_intake import health_event, launch, records, schedule
from tests.support.emf import metric_counts
from tests.support.functions import LambdaContext
from tests.support.stack import Stack


def closed(event: dict[str, Any]) -> dict[str, Any]:
    """``event`` as AWS Health sends it when the event closes (its status; the rest as before)."""
    return {**event, "id": "closed-update-1", "detail": {**event["detail"], "statusCode": "closed"}}


def warnings_and_errors(output: str) -> list[str]:
    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    return [line["message"] for line in lines if line.get("level") in ("WARNING", "ERROR")]


def rejections(output: str) -> dict[str, float]:
    return {
        dict(dimensions).get("reason", ""): count
        for (name, dimensions), count in metric_counts(output).items()
        if name == "LifecycleEventsRejected"
    }


@pytest.mark.parametrize(
    ("starts_in", "description"),
    [
        (timedelta(hours=-1), "[Completed] The instance is running on degraded hardware"),
        (timedelta(days=2), "[Canceled] The instance is running on degraded hardware"),
    ],
    ids=["maintenance done", "maintenance called off"],
)
def test_a_health_event_closed_is_acknowledged_drains_nothing_and_pages_nobody(
    intake_fn: ModuleType,
    stack: Stack,
    capsys: pytest.CaptureFixture[str],
    starts_in: timedelta,
    description: str,
) -> None:
    # Given an instance of a managed group whose retirement EC2 lists as completed (it started an hour ago) or as
    # called off (it was to start in two days), and AWS Health's update of its event, closed. Health sends one
    # for every scheduled change it closes: the instances of a fleet, each maintenance, routinely.
    instance = launch()
    starts = datetime.now(UTC).replace(microsecond=0) + starts_in
    schedule(instance, starts, description=description)

    # When it comes by EventBridge
    intake_fn.handler(closed(health_event(instance, starts)), LambdaContext())

    # Then no drain starts (a maintenance called off drains no node) and nothing is rejected: every rejection
    # pages (RejectedEventsAlarm), whose runbook calls a "stale" disruption a forged or late one, and AWS's own
    # closing of a maintenance is neither. No warning either: nothing is wrong.
    assert records() == []
    output = capsys.readouterr().out
    assert rejections(output) == {}
    assert warnings_and_errors(output) == []
