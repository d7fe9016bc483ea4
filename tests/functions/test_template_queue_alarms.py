"""Every queue a function takes its events from is watched: a queue nobody consumes (its mapping disabled, the
function's role refused sqs:ReceiveMessage, its reserved concurrency 0) fails no invocation and throttles none,
so only the age of its oldest message tells of it (SQS publishes it whether or not anything receives)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from tests.functions.test_operations_template import RESOURCES, alarm_fires, alarms, intrinsics


def consumed_queues() -> dict[str, str]:
    """Queue resource -> the function whose SQS event source takes its messages."""
    found = {}
    for name, resource in RESOURCES.items():
        if resource["Type"] != "AWS::Serverless::Function":
            continue
        for event in (resource["Properties"].get("Events") or {}).values():
            if event["Type"] == "SQS":
                found[event["Properties"]["Queue"]["Fn::GetAtt"][0]] = name
    return found


def age_alarm(queue: str) -> tuple[str, Mapping[str, Any]] | None:
    watching = [
        (name, alarm)
        for name, alarm in alarms()
        if alarm.get("MetricName") == "ApproximateAgeOfOldestMessage"
        and alarm.get("Dimensions") == [{"Name": "QueueName", "Value": {"Fn::GetAtt": [queue, "QueueName"]}}]
    ]
    assert len(watching) <= 1
    return watching[0] if watching else None


def test_the_scan_finds_the_consumed_queues() -> None:
    assert set(consumed_queues()) == {"IntakeQueue", "DrainQueue", "WakeQueue", "EipQueue"}


@pytest.mark.parametrize("queue", sorted(consumed_queues()))
def test_every_consumed_queue_has_an_alarm_on_the_age_of_its_oldest_message(queue: str) -> None:
    assert age_alarm(queue) is not None, f"nothing pages when {queue} stops being consumed"


def test_a_stalled_intake_queue_pages_and_a_message_retried_to_its_dead_letter_queue_does_not() -> None:
    # Hooks that notify SQS directly send their actions to the intake queue. Stalled, nothing fails: the sweeper
    # keeps the actions alive and adopts them half an interval later, silently (LifecyclesAdopted has no
    # alarm), every lifecycle late by a sweep or two, until someone notices.
    found = age_alarm("IntakeQueue")
    assert found is not None
    name, properties = found
    alarm = intrinsics({}).resolve(properties)
    queue = RESOURCES["IntakeQueue"]["Properties"]
    visibility, receives = queue["VisibilityTimeout"], queue["RedrivePolicy"]["maxReceiveCount"]

    def ages(since: int, until: int) -> dict[int, float]:
        # SQS's minute datapoints of the queue's oldest message, sent at `since`, there until `until`
        return {at: float(at - since) for at in range(since, until, 60)}

    # a message failed at each of its receives, a visibility timeout apart, until the dead-letter queue takes
    # it: the oldest a message gets in a queue that is consumed
    retried = ages(600, 600 + receives * visibility + 60)
    assert not alarm_fires(alarm, retried, 7200), f"{name}: a message on its way to the dead letters pages"
    # a queue nobody consumes: the first notification waits on
    stalled = ages(600, 7200)
    fired = alarm_fires(alarm, stalled, 7200)
    assert fired, f"{name}: a stalled intake queue never pages"
    assert fired[0] - 600 <= 1800, "it pages within half an hour of the first message left waiting"
