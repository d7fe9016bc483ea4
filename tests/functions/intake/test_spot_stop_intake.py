"""Intake of a Spot interruption that stops its instance (a persistent Spot request's instance, tagged for the stack;
``instance-action: stop`` in EC2's warning), on moto: the record notes what EC2 does to the instance, which its
cleanup needs to uncordon the node once EC2 starts the instance again; and the next interruption of the instance,
once it runs again, starts a drain of its own while the first lifecycle still watches for that start. Taken for a
duplicate of the first, the watch lifted the cordon at its next look and the node took pods that the second
interruption then stopped undrained."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import boto3

from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle.domain.model import KEPT_ON_NODE, SPOT_ACTION, SPOT_WATCH, Step, Transition
from tests.support.events import load_event
from tests.support.functions import LambdaContext
from tests.support.stack import Stack

OWNER = "stack-a"  # tests/conftest.py's stack


def a_tagged_instance() -> str:
    """A running instance of no group, tagged for the stack (a persistent Spot request's)."""
    launched = boto3.client("ec2").run_instances(
        ImageId="ami-12c6146b",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": "nodecycle:owner", "Value": OWNER}]}
        ],
    )
    return str(launched["Instances"][0]["InstanceId"])


def warning(instance: str, action: str, at: datetime, event_id: str) -> dict[str, Any]:
    event = load_event("eventbridge-spot-interruption.json")
    return {
        **event,
        "id": event_id,
        "time": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "resources": [f"arn:aws:ec2:eu-west-1a:instance/{instance}"],
        "detail": {"instance-id": instance, "instance-action": action},
    }


def test_a_spot_warning_that_stops_its_instance_is_noted_on_its_record(
    intake_fn: ModuleType, stack: Stack
) -> None:
    instance = a_tagged_instance()
    intake_fn.handler(
        warning(instance, "stop", datetime.now(UTC), "6a0c2f8e-1d2b-4c3a-9e8f-7a6b5c4d3e2f"), LambdaContext()
    )
    record = DynamoRecordStore(stack.table, ttl=timedelta(days=1)).get(
        f"{instance}/{Transition.SPOT_INTERRUPTION.short}"
    )
    assert record is not None
    assert record.extra.get(SPOT_ACTION) == "stop"


def test_a_spot_warning_that_terminates_its_instance_notes_nothing(
    intake_fn: ModuleType, stack: Stack
) -> None:
    instance = a_tagged_instance()
    intake_fn.handler(
        warning(instance, "terminate", datetime.now(UTC), "0b1c2d3e-4f5a-4b6c-8d7e-9f0a1b2c3d4e"),
        LambdaContext(),
    )
    record = DynamoRecordStore(stack.table, ttl=timedelta(days=1)).get(
        f"{instance}/{Transition.SPOT_INTERRUPTION.short}"
    )
    assert record is not None
    assert SPOT_ACTION not in record.extra


def test_the_next_interruption_of_a_spot_instance_started_again_drains_it_while_the_first_still_watches(
    intake_fn: ModuleType, stack: Stack
) -> None:
    # Given a Spot instance stopped by an interruption three hours ago, its node drained and left cordoned, the
    # lifecycle of that interruption at its cleanup's watch for the instance to run again (EC2 started it since)
    instance = a_tagged_instance()
    first_at = datetime.now(UTC) - timedelta(hours=3)
    store = DynamoRecordStore(stack.table, ttl=timedelta(days=1))
    intake_fn.handler(
        warning(instance, "stop", datetime.now(UTC), "6a0c2f8e-1d2b-4c3a-9e8f-7a6b5c4d3e2f"), LambdaContext()
    )
    record_id = f"{instance}/{Transition.SPOT_INTERRUPTION.short}"
    first = store.get(record_id)
    assert first is not None
    watching = first.model_copy(
        update={
            # (its times as they were three hours ago: intake took its warning in then)
            "started_at": first_at,
            "received_at": first_at,
            "due_at": first_at,
            "heartbeat_deadline": first_at + timedelta(minutes=2),
            "global_deadline": first_at + timedelta(minutes=2),
            "step": Step.CLEANUP,
            "seq": first.seq + 4,
            "updated_at": datetime.now(UTC),
            "node": "ip-10-0-1-10.eu-west-1.compute.internal",
            "drain_started_at": first_at,
            "outcome": "drained",
            "extra": {
                **first.extra,
                "set_on_node": {"cordon": True, "lb": False},
                SPOT_WATCH: (first_at + timedelta(minutes=2)).isoformat(),
            },
        }
    )
    assert store.commit(watching, expected_seq=first.seq)

    # When EC2 warns of its next interruption
    second_id = "9e8d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b"
    intake_fn.handler(warning(instance, "stop", datetime.now(UTC), second_id), LambdaContext())

    # Then a drain of its own starts on the record, taking over the cordon the first left on the node
    record = store.get(record_id)
    assert record is not None
    assert (record.token, record.step, record.seq) == (second_id, Step.ACQUIRE_SLOT, watching.seq + 1)
    assert record.extra.get(KEPT_ON_NODE) == {"cordon": True, "lb": False}
    assert record.extra.get(SPOT_ACTION) == "stop"
