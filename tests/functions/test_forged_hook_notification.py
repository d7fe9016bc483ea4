"""The forged hook notification the sandbox builds (for the forged-notification tests and the chaos campaign's
forgeries) is one intake parses as Auto Scaling's own: the move its transition tells, dated when it was sent."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest

from nodecycle.contracts.events import Home, from_sqs_body
from nodecycle.domain.model import LifecycleEvent, Transition
from nodecycle_sandbox.aws.notifications import forged_hook_notification
from nodecycle_sandbox.aws.records import LAUNCHING, TERMINATING

HOME = Home(account="123456789012", region="eu-west-1")


@pytest.mark.parametrize(
    ("transition", "told", "move"),
    [
        (TERMINATING, Transition.TERMINATING, ("AutoScalingGroup", "EC2")),
        (LAUNCHING, Transition.LAUNCHING, ("EC2", "AutoScalingGroup")),
    ],
)
def test_a_forged_hook_notification_is_parsed_as_auto_scalings_own(
    transition: str, told: Transition, move: tuple[str, str]
) -> None:
    at = time.time()
    body = forged_hook_notification(
        account=HOME.account,
        group="nodes",
        hook="nodecycle-terminate",
        instance_id="i-0123456789abcdef0",
        transition=transition,
        token="6f2ab1c3-9d4e-4f5a-8b6c-7d8e9f0a1b2c",
        at=at,
    )

    (event,) = from_sqs_body(json.dumps(body), HOME)

    assert isinstance(event, LifecycleEvent)
    assert (event.transition, event.group, event.hook, event.instance_id) == (
        told,
        "nodes",
        "nodecycle-terminate",
        "i-0123456789abcdef0",
    )
    assert (event.origin, event.destination) == move
    assert abs((event.started_at - datetime.fromtimestamp(at, UTC)).total_seconds()) < 0.001
