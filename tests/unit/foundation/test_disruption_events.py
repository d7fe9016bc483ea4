"""The EC2 and AWS Health events of disruptions without a hook: each shape normalized, bad input named."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from nodecycle.contracts.disruption_events import NotADisruption
from nodecycle.contracts.events import from_eventbridge, from_sqs_body
from nodecycle.contracts.lifecycle_events import InvalidLifecycleEvent
from nodecycle.contracts.lifecycle_events import TestNotification as HookTestNotification
from nodecycle.domain.model import DisruptionEvent, LifecycleEvent, Transition, parse_record_id
from tests.support.events import load_event, sqs_bodies

INSTANCE = "i-0a1b2c3d4e5f60718"


def only(events: list[LifecycleEvent | DisruptionEvent] | HookTestNotification) -> DisruptionEvent:
    assert isinstance(events, list)
    (event,) = events
    assert isinstance(event, DisruptionEvent)
    return event


def test_a_spot_interruption_warning_strikes_two_minutes_after_it_was_sent() -> None:
    event = only(from_eventbridge(load_event("eventbridge-spot-interruption.json")))
    assert (event.instance_id, event.cause, event.delivery) == (
        INSTANCE,
        Transition.SPOT_INTERRUPTION,
        "eventbridge",
    )
    assert event.strikes_at - event.happened_at == timedelta(minutes=2)
    # one record per instance and cause: a second warning of the same interruption is the same lifecycle
    assert event.record_id == f"{INSTANCE}/spot-interruption"
    assert parse_record_id(event.record_id) == (INSTANCE, Transition.SPOT_INTERRUPTION, None)


def test_the_same_warning_through_an_sqs_target_says_so() -> None:
    (body,) = sqs_bodies("sqs-eventbridge-spot-interruption.json")
    event = only(from_sqs_body(body))
    assert (event.cause, event.delivery) == (Transition.SPOT_INTERRUPTION, "sqs-eventbridge")


def test_a_rebalance_recommendation_and_a_stopping_instance() -> None:
    rebalance = only(from_eventbridge(load_event("eventbridge-rebalance-recommendation.json")))
    assert rebalance.cause is Transition.REBALANCE
    stopped = only(from_eventbridge(load_event("eventbridge-instance-stopped.json")))
    assert (stopped.cause, stopped.state) == (Transition.STATE_CHANGE, "stopping")


def test_an_instance_starting_is_no_disruption() -> None:
    event = load_event("eventbridge-instance-stopped.json")
    event["detail"]["state"] = "running"
    with pytest.raises(NotADisruption, match="running"):
        from_eventbridge(event)


def test_scheduled_maintenance_strikes_at_its_start_time_in_aws_healths_date_format() -> None:
    event = only(from_eventbridge(load_event("eventbridge-health-scheduled-retirement.json")))
    assert event.cause is Transition.SCHEDULED_CHANGE
    assert event.strikes_at == datetime(2026, 12, 7, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("type_code", "code"),
    [
        ("AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED", "instance-retirement"),
        ("AWS_EC2_SYSTEM_REBOOT_MAINTENANCE_SCHEDULED", "system-reboot"),
        ("AWS_EC2_PERSISTENT_INSTANCE_RETIREMENT_SCHEDULED", None),  # (a type that names no EC2 event code)
    ],
)
def test_scheduled_maintenance_carries_the_ec2_event_code_its_health_type_tells(
    type_code: str, code: str | None
) -> None:
    event = load_event("eventbridge-health-scheduled-retirement.json")
    event["detail"]["eventTypeCode"] = type_code
    assert only(from_eventbridge(event)).code == code


def test_a_health_event_of_another_kind_is_no_disruption() -> None:
    event = load_event("eventbridge-health-scheduled-retirement.json")
    event["detail"]["eventTypeCategory"] = "issue"
    with pytest.raises(NotADisruption):
        from_eventbridge(event)


@pytest.mark.parametrize(
    ("change", "reason", "says"),
    [
        (lambda e: e["detail"].pop("instance-id"), "missing-field", "instance-id is missing"),
        (lambda e: e["detail"].update({"instance-id": "vm-1"}), "invalid-field", "instance-id"),
        (lambda e: e["detail"].update({"instance-action": "explode"}), "invalid-field", "instance-action"),
    ],
)
def test_a_malformed_spot_warning_is_refused_naming_what_is_wrong(
    change: object, reason: str, says: str
) -> None:
    event = load_event("eventbridge-spot-interruption.json")
    change(event)  # type: ignore[operator]
    with pytest.raises(InvalidLifecycleEvent, match=says) as raised:
        from_eventbridge(event)
    assert raised.value.reason == reason


def test_a_health_event_naming_no_instance_tells_of_no_disruption() -> None:
    # (a Dedicated Host's maintenance names the host, a public event nothing: AWS's own, of no node)
    event = load_event("eventbridge-health-scheduled-retirement.json")
    for entities in ([], [{"entityValue": "h-0123456789abcdef0"}]):
        event["detail"]["affectedEntities"] = entities
        with pytest.raises(NotADisruption, match="names no instance"):
            from_eventbridge(json.loads(json.dumps(event)))


def test_times_without_their_zone_are_refused_naming_the_field() -> None:
    # a naive time cannot be set against the clock's aware one: refused at the door, not a TypeError later
    spot = load_event("eventbridge-spot-interruption.json")
    spot["time"] = "2026-12-01T10:00:00"
    with pytest.raises(InvalidLifecycleEvent, match="time") as raised:
        from_eventbridge(spot)
    assert raised.value.reason == "invalid-field"
    health = load_event("eventbridge-health-scheduled-retirement.json")
    health["detail"]["startTime"] = "2026-12-07T10:00:00"
    with pytest.raises(InvalidLifecycleEvent, match="startTime"):
        from_eventbridge(health)


def test_times_no_aws_service_writes_are_refused_naming_the_field() -> None:
    # near the calendar's ends, a strike time (+2 min) or a lead before a maintenance overflows: refused here
    spot = load_event("eventbridge-spot-interruption.json")
    spot["time"] = "9999-12-31T23:59:59Z"
    with pytest.raises(InvalidLifecycleEvent, match="time") as raised:
        from_eventbridge(spot)
    assert raised.value.reason == "invalid-field"
    health = load_event("eventbridge-health-scheduled-retirement.json")
    health["detail"]["startTime"] = "0001-01-01T00:00:00Z"
    with pytest.raises(InvalidLifecycleEvent, match="startTime") as raised:
        from_eventbridge(health)
    assert raised.value.reason == "invalid-field"
