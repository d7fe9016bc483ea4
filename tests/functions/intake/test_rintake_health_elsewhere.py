"""AWS Health events delivered to this account and region about another: Health's EventBridge schema
(health/latest/ug/aws-health-events-eventbridge-schema.html) says an event's ``account`` and ``region`` are where it
was delivered, not what it is about. An organization's management or delegated administrator account receives its
members' events (``detail.affectedAccount``), and the partition's backup region copies of other regions' events
(``detail.eventRegion``, ``backupEvent`` "true": the schema's sample of one is delivered to us-west-2 about
us-east-1). Both pass the rule's ``account`` and ``region``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import ModuleType

import pytest

from tests.functions.intake.test_disruption_intake import records
from tests.functions.intake.test_rintake_health_updates import rejections, warnings_and_errors
from tests.functions.intake.test_rintake_health_without_instances import as_documented
from tests.support.functions import LambdaContext
from tests.support.stack import Stack


@pytest.mark.parametrize(
    "elsewhere",
    [
        {"eventRegion": "eu-central-1", "backupEvent": "true"},
        {"affectedAccount": "210987654321"},
    ],
    ids=["a backup copy of another region's", "another account's, by organizational view"],
)
def test_a_health_event_of_another_region_or_account_delivered_here_is_acknowledged(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str], elsewhere: dict[str, str]
) -> None:
    # Given AWS Health's scheduled retirement of an instance of another region (a backup copy, which Health sends
    # to the partition's backup region: its `region` this one, its `eventRegion` the other) or of another account
    # of the organization (its `account` this one, the management or delegated administrator account; its
    # `affectedAccount` the other): AWS's own events, delivered to this stack's rule, of instances it cannot have
    starts = datetime.now(UTC).replace(microsecond=0) + timedelta(days=3)
    event = as_documented("i-0a1b2c3d4e5f60718", starts)
    event["detail"] = {**event["detail"], **elsewhere}

    # When the rule delivers it
    intake_fn.handler(event, LambdaContext())

    # Then nothing is drained, and nothing is rejected (no page): it tells of nothing of this account and region
    assert records() == []
    output = capsys.readouterr().out
    assert rejections(output) == {}
    assert warnings_and_errors(output) == []
