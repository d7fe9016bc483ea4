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
from typing import Any

import boto3

from nodecycle_sandbox.aws import TERMINATING
from tests.functions.intake.test_crossed_token_taken_in_second import two_in_service, two_terminating
from tests.functions.intake.test_foreign_and_forged_actions import (
    Sandbox,
    hook_notification,
    records,
    sandbox,  # noqa: F401 (the fixture)
)
from tests.support.events import sqs_event
from tests.support.functions import LambdaContext
from tests.support.stack import Stack, receive_all


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

    # When a notification on the intake queue names the first instance with the second's token, before the first
    # instance's own event came
    crossed = hook_notification(first, other.token, datetime.now(UTC) + timedelta(seconds=1))
    assert sandbox.intake.handler(sqs_event(crossed), LambdaContext()) == {"batchItemFailures": []}

    # Then no lifecycle is written for the first instance under the second's token, and no work is sent for it
    # (the second's own first step alone)
    assert {(r["instance_id"], r["token"]) for r in records()} == {(second, other.token)}
    sent = [json.loads(m["Body"])["record_id"] for m in receive_all(stack.drain_queue)]
    assert sent == [f"{second}/terminate/{other.token}"]


def test_the_true_event_of_a_token_a_crossed_notification_took_first_is_rejected_and_its_instance_left_unclaimed(
    sandbox: Sandbox,  # noqa: F811
    stack: Stack,
) -> None:
    """The reverse order: the crossed notification first, then the event of the instance whose token it is. No
    Auto Scaling API tells which instance a token is of (one that takes a call's token alone confirms both), so
    the first holds the token and the second is rejected, whichever is true. What that leaves, stated here: the
    true instance has no lifecycle and no claim of its action, which the sweeper's adoption finds (by instance,
    as for a lost event); the crossed lifecycle goes on under the token, and once the token's action ends (that
    adoption completes it), drains on for its own instance's action, which the hook holds
    (tests/unit/drain/test_crossed_lifecycle_carried_over.py)."""
    # Given an Auto Scaling that takes a call's token alone, two instances both held by the terminate hook, and
    # a notification naming the first with the second's live token, taken in before the second's own event
    sandbox.control.configure(token_checked_against_instance=False)
    first, second = two_terminating(sandbox)
    other = sandbox.action(second, TERMINATING)
    crossed = hook_notification(first, other.token, datetime.now(UTC) + timedelta(seconds=1))
    assert sandbox.intake.handler(sqs_event(crossed), LambdaContext()) == {"batchItemFailures": []}

    # When the second instance's own event comes
    sandbox.intake.handler(sandbox.bus.of(other.token), LambdaContext())

    # Then it is rejected (the token is the crossed lifecycle's), nothing is sent for it (the crossed lifecycle's
    # first step alone), and its instance has no claim under the hook: the sweeper's adoption takes its action in
    assert {(r["instance_id"], r["token"]) for r in records()} == {(first, other.token)}
    sent = [json.loads(m["Body"])["record_id"] for m in receive_all(stack.drain_queue)]
    assert sent == [f"{first}/terminate/{other.token}"]
    claims = boto3.resource("dynamodb").Table("nodecycle-lifecycle").scan()["Items"]
    assert not [item for item in claims if str(item["id"]).startswith(f"claim#{second}#")]


def test_a_forgery_naming_an_instance_in_service_with_a_live_token_does_not_keep_the_true_event_out(
    sandbox: Sandbox,  # noqa: F811
    stack: Stack,
) -> None:
    """A forgery taken in first holds the token too, but Auto Scaling does not confirm it (its instance is in
    service): the true event takes the token from it, and the forgery ends at its own check."""
    # Given an Auto Scaling that takes a call's token alone, an instance in service and one held by the terminate
    # hook, and a notification naming the one in service with the other's live token, taken in first
    sandbox.control.configure(token_checked_against_instance=False)
    serving, leaving = two_in_service(sandbox)
    boto3.client("autoscaling").terminate_instance_in_auto_scaling_group(
        InstanceId=leaving, ShouldDecrementDesiredCapacity=True
    )
    action = sandbox.action(leaving, TERMINATING)
    forged = hook_notification(serving, action.token, datetime.now(UTC))
    assert sandbox.intake.handler(sqs_event(forged), LambdaContext()) == {"batchItemFailures": []}

    # When the terminating instance's own event comes
    sandbox.intake.handler(sandbox.bus.of(action.token), LambdaContext())

    # Then it is taken in (its first step sent), the token now its lifecycle's
    assert (leaving, action.token) in {(r["instance_id"], r["token"]) for r in records()}
    sent = [json.loads(m["Body"])["record_id"] for m in receive_all(stack.drain_queue)]
    assert f"{leaving}/terminate/{action.token}" in sent
    holder = (
        boto3.resource("dynamodb").Table("nodecycle-lifecycle").get_item(Key={"id": f"token#{action.token}"})
    )
    assert holder["Item"]["lifecycle"] == f"{leaving}/terminate/{action.token}"


def test_the_holder_of_a_token_is_told_by_the_write_it_refuses_not_read_again(
    sandbox: Sandbox,  # noqa: F811
    stack: Stack,
) -> None:
    """DynamoDB returns the item that failed a transaction's condition with its cancellation reasons
    (ReturnValuesOnConditionCheckFailure ALL_OLD, per item, as moto does): the token item names its holder there,
    and a GetItem of it after the refused write is a call more on the crossed path for the same answer."""
    # Given an Auto Scaling that takes a call's token alone, two instances held by the terminate hook, the second
    # one's own action taken in, and DynamoDB's item reads counted (before any client is made: each copies the
    # session's handlers when it is)
    read: list[str] = []

    def reading(params: dict[str, Any], **_: Any) -> None:
        read.append(params["Key"]["id"]["S"])

    events = boto3._get_default_session().events
    events.register("before-parameter-build.dynamodb.GetItem", reading, unique_id="tests.token-reads")
    try:
        sandbox.control.configure(token_checked_against_instance=False)
        first, second = two_terminating(sandbox)
        other = sandbox.action(second, TERMINATING)
        sandbox.intake.handler(sandbox.bus.of(other.token), LambdaContext())
        read.clear()

        # When a notification names the first instance with the second's token
        crossed = hook_notification(first, other.token, datetime.now(UTC) + timedelta(seconds=1))
        assert sandbox.intake.handler(sqs_event(crossed), LambdaContext()) == {"batchItemFailures": []}
    finally:
        events.unregister("before-parameter-build.dynamodb.GetItem", unique_id="tests.token-reads")

    # Then it is rejected as before (nothing written for it), and the token item was not read: the refused write
    # named its holder, whose record is read (whether Auto Scaling confirmed it)
    assert {(r["instance_id"], r["token"]) for r in records()} == {(second, other.token)}
    assert f"token#{other.token}" not in read
    assert f"{second}/terminate/{other.token}" in read
