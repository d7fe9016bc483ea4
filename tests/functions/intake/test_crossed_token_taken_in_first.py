"""A crossed notification taken in before the instance's own event: a terminating instance named, on the intake
queue, with the live token of another terminating instance of its group whose own lifecycle nodecycle already
holds, against the sandbox's Auto Scaling told to take a call's token alone (as AWS may: it does not say it refuses
a token named with another instance). A token names one action of one instance; nodecycle has that action's
lifecycle already, under the other instance. Taken in, the crossed lifecycle took a slot for the instance's node and
cordoned it; when the other instance's action was completed (by its own lifecycle), Auto Scaling no longer held the
token, the crossed lifecycle ended, and its cleanup, finding the instance still leaving service (its own action
open, its event not yet come), cleared the node's claim and gave the slot back with the node left cordoned: three
nodes cordoned against a limit of two, and the claim cleared while the instance's own action was open (seed 94
scenario 4, ``--forge --lag``, a refresh: budget and ownership)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from nodecycle_sandbox.aws import TERMINATING
from tests.functions.intake.test_crossed_token_taken_in_second import two_terminating
from tests.functions.intake.test_foreign_and_forged_actions import (
    Sandbox,
    hook_notification,
    records,
    sandbox,  # noqa: F401 (the fixture)
)
from tests.support.events import sqs_event
from tests.support.functions import LambdaContext
from tests.support.stack import Stack, receive_all


@pytest.mark.xfail(
    strict=True,
    reason="intake takes in a crossed token before the instance's own event: the token is looked up for the "
    "named instance's action only, not for the lifecycle of the other instance that already holds it; and the "
    "crossed lifecycle's cleanup, once the token's action is over, leaves the node cordoned with its claim "
    "cleared and its slot given back while the instance's own action is open (seed 94 scenario 4)",
)
def test_an_instance_named_with_a_token_another_instances_lifecycle_holds_is_not_taken_in(
    sandbox: Sandbox,  # noqa: F811
    stack: Stack,
) -> None:
    # Given an Auto Scaling that takes a call's token alone, two instances both held by the terminate hook, and
    # the second one's own action taken in (its lifecycle holds its token)
    sandbox.control.configure(token_checked_against_instance=False)
    first, second = two_terminating(sandbox)
    other = sandbox.action(second, TERMINATING)
    sandbox.intake.handler(sandbox.bus.of(other.token), LambdaContext())
    receive_all(stack.drain_queue)  # (the second's own first step)

    # When a notification on the intake queue names the first instance with the second's token, before the first
    # instance's own event came
    crossed = hook_notification(first, other.token, datetime.now(UTC) + timedelta(seconds=1))
    assert sandbox.intake.handler(sqs_event(crossed), LambdaContext()) == {"batchItemFailures": []}

    # Then no lifecycle is written for the first instance under the second's token, and no work is sent for it
    assert {(r["instance_id"], r["token"]) for r in records()} == {(second, other.token)}
    assert [json.loads(m["Body"])["record_id"] for m in receive_all(stack.drain_queue)] == []
