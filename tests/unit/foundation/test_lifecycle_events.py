"""Every shape AWS delivers a lifecycle action in parses to the same normalized event; bad input names its fault."""

from __future__ import annotations

import json

import pytest

from nodecycle.contracts import events
from nodecycle.contracts.lifecycle_events import InvalidLifecycleEvent, from_eventbridge
from nodecycle.contracts.lifecycle_events import (
    TestNotification as HookTestNotification,
)
from nodecycle.domain.model import LifecycleEvent, Transition
from tests.support.events import load_event, sqs_bodies


def from_sqs_body(body: str) -> LifecycleEvent | HookTestNotification:
    """What intake reads from a queue message that holds one lifecycle action (or a test notification)."""
    parsed = events.from_sqs_body(body)
    if isinstance(parsed, HookTestNotification):
        return parsed
    (event,) = parsed
    assert isinstance(event, LifecycleEvent)
    return event


def _comparable(event: LifecycleEvent) -> dict[str, object]:
    data = event.model_dump(exclude={"delivery", "started_at"})
    data["started_at"] = event.started_at.replace(microsecond=0)
    return data


def test_the_three_deliveries_of_one_terminate_action_normalize_to_the_same_event() -> None:
    direct = from_eventbridge(load_event("eventbridge-terminate.json"))
    (hook_body,) = sqs_bodies("sqs-hook-terminate.json")
    (bridged_body,) = sqs_bodies("sqs-eventbridge-terminate.json")
    from_hook = from_sqs_body(hook_body)
    bridged = from_sqs_body(bridged_body)

    assert isinstance(from_hook, LifecycleEvent)
    assert isinstance(bridged, LifecycleEvent)
    assert _comparable(direct) == _comparable(from_hook) == _comparable(bridged)
    assert (direct.delivery, from_hook.delivery, bridged.delivery) == (
        "eventbridge",
        "sqs",
        "sqs-eventbridge",
    )
    assert direct.transition is Transition.TERMINATING
    assert direct.notification_metadata == "drain-timeout=600"
    assert direct.record_id == "i-0a1b2c3d4e5f60718/terminate/9f0c3d3e-6a8b-4c8e-9d57-2f7b1e0a6c41"


def test_launch_deliveries_normalize_to_the_same_event() -> None:
    direct = from_eventbridge(load_event("eventbridge-launch.json"))
    (body,) = sqs_bodies("sqs-hook-launch.json")
    from_hook = from_sqs_body(body)
    assert isinstance(from_hook, LifecycleEvent)
    assert _comparable(direct) == _comparable(from_hook)
    assert direct.transition is Transition.LAUNCHING


@pytest.mark.parametrize(
    ("name", "from_pool", "into_pool"),
    [
        ("eventbridge-launch-into-warm-pool.json", False, True),
        ("eventbridge-launch-from-warm-pool.json", True, False),
        ("eventbridge-terminate-from-warm-pool.json", True, False),
    ],
)
def test_warm_pool_origins_and_destinations_are_kept(name: str, from_pool: bool, into_pool: bool) -> None:
    event = from_eventbridge(load_event(name))
    assert (event.from_warm_pool, event.into_warm_pool) == (from_pool, into_pool)


def test_a_test_notification_is_recognized() -> None:
    (body,) = sqs_bodies("sqs-test-notification.json")
    parsed = from_sqs_body(body)
    assert isinstance(parsed, HookTestNotification)
    assert parsed.AutoScalingGroupName == "nodes-general"


def _hook_body(**changes: object) -> str:
    (body,) = sqs_bodies("sqs-hook-terminate.json")
    data = json.loads(body)
    for key, value in changes.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    return json.dumps(data)


@pytest.mark.parametrize(
    ("body", "reason", "says"),
    [
        ("{not json", "malformed-json", "not JSON"),
        ("[1, 2]", "unknown-shape", "JSON list"),
        ('{"hello": "world"}', "unknown-shape", "neither an EventBridge event nor a hook notification"),
        (
            _hook_body(LifecycleTransition="autoscaling:EC2_INSTANCE_REBOOTING"),
            "unknown-transition",
            "REBOOTING",
        ),
        # nodecycle's own names for the disruptions no hook waits for: never an action of a hook
        *(
            (_hook_body(LifecycleTransition=str(t)), "unknown-transition", "not a lifecycle hook's")
            for t in Transition
            if not t.has_hook
        ),
        (_hook_body(LifecycleActionToken=None), "missing-field", "LifecycleActionToken is missing"),
        (_hook_body(EC2InstanceId=None), "missing-field", "EC2InstanceId is missing"),
        (_hook_body(EC2InstanceId="not-an-instance"), "invalid-field", "EC2InstanceId"),
        (_hook_body(LifecycleActionToken=""), "invalid-field", "LifecycleActionToken"),
        (_hook_body(LifecycleActionToken="not-a-token"), "invalid-field", "LifecycleActionToken"),
        (_hook_body(Time="yesterday"), "invalid-field", "Time"),
        # a time without its zone cannot be set against the hook's deadlines: refused, not crashed on later
        (_hook_body(Time="2026-12-01T10:00:00"), "invalid-field", "Time"),
        # a time no AWS service writes, whose deadlines would overflow the calendar: refused, not retried
        (_hook_body(Time="9999-12-31T23:59:59Z"), "invalid-field", "Time"),
        (_hook_body(Time="0001-01-01T00:00:00Z"), "invalid-field", "Time"),
        # nested past what the JSON parser recurses into: refused as malformed, not a RecursionError
        ("[" * 100_000 + "]" * 100_000, "malformed-json", "not JSON"),
        ('{"a": ' * 100_000 + "1" + "}" * 100_000, "malformed-json", "not JSON"),
    ],
)
def test_bad_sqs_bodies_are_rejected_with_a_reason_that_names_the_fault(
    body: str, reason: str, says: str
) -> None:
    with pytest.raises(InvalidLifecycleEvent, match=says) as raised:
        from_sqs_body(body)
    assert raised.value.reason == reason


def test_an_event_from_another_source_is_rejected() -> None:
    event = load_event("eventbridge-terminate.json")
    event["source"] = "custom.autoscaling"
    with pytest.raises(InvalidLifecycleEvent, match=r"custom\.autoscaling") as raised:
        from_eventbridge(event)
    assert raised.value.reason == "wrong-source"


def test_an_autoscaling_event_that_is_not_a_lifecycle_action_is_rejected() -> None:
    event = load_event("eventbridge-terminate.json")
    event["detail-type"] = "EC2 Instance Terminate Successful"
    with pytest.raises(InvalidLifecycleEvent) as raised:
        from_eventbridge(event)
    assert raised.value.reason == "unsupported-detail-type"


def test_a_transition_that_contradicts_the_detail_type_is_rejected() -> None:
    event = load_event("eventbridge-terminate.json")
    event["detail"]["LifecycleTransition"] = "autoscaling:EC2_INSTANCE_LAUNCHING"
    with pytest.raises(InvalidLifecycleEvent, match="does not match detail-type") as raised:
        from_eventbridge(event)
    assert raised.value.reason == "unknown-transition"


@pytest.mark.parametrize(
    ("carried", "text"),
    [
        ({"pool": "general", "drain": {"timeout": 600}}, '{"pool":"general","drain":{"timeout":600}}'),
        (["général", 1], '["général",1]'),
        ({}, "{}"),
        (True, "true"),  # (whether EventBridge carries a scalar so is not known: read either way)
        ("drain-timeout=600", "drain-timeout=600"),
    ],
)
def test_metadata_eventbridge_carries_as_json_is_kept_as_its_text(carried: object, text: str) -> None:
    # Given an EventBridge event of a hook whose metadata is JSON, carried as that JSON value (as EventBridge does)
    event = load_event("eventbridge-terminate.json")
    event["detail"]["NotificationMetadata"] = carried

    # When it is read, directly or off a queue, Then the action is taken in, its metadata as compact JSON text
    assert from_eventbridge(event).notification_metadata == text
    parsed = from_sqs_body(json.dumps(event))
    assert isinstance(parsed, LifecycleEvent)
    assert parsed.notification_metadata == text


@pytest.mark.parametrize(
    "carried",
    [{"x": "y" * 1_100}, [float("nan")]],
    ids=["longer than a hook's metadata", "not JSON"],
)
def test_metadata_no_hook_could_carry_is_refused_naming_it(carried: object) -> None:
    # Given an event (by the queue, where anyone allowed to send writes it) whose metadata no hook could hold:
    # longer as text than Auto Scaling lets metadata be, or a value JSON cannot write back
    event = load_event("eventbridge-terminate.json")
    event["detail"]["NotificationMetadata"] = carried

    # When it is read, Then it is refused as invalid, naming the field
    with pytest.raises(InvalidLifecycleEvent) as refused:
        from_eventbridge(event)
    assert refused.value.reason == "invalid-field"
    assert "NotificationMetadata" in str(refused.value)
