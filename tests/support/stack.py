"""The stack's AWS resources, created on moto from template.yaml so tests cannot drift from it."""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3

from nodecycle_sandbox.runner.cfn_yaml import load_template

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"


@dataclass(frozen=True)
class Stack:
    table: str
    drain_queue: str
    eip_queue: str
    intake_queue: str
    wake_queue: str

    def env(self) -> dict[str, str]:
        return {
            "NODECYCLE_RECORD_TABLE": self.table,
            "NODECYCLE_DRAIN_QUEUE_URL": self.drain_queue,
            "NODECYCLE_EIP_QUEUE_URL": self.eip_queue,
            "NODECYCLE_WAKE_QUEUE_URL": self.wake_queue,
        }


@functools.cache
def _table_properties() -> dict[str, Any]:
    """The lifecycle table's properties in the template: parsed once a run. (Parsing the 95 kB template was
    20 ms of CPU, about half of each ``stack`` fixture's 45 ms, and some 250 functions tests take one.)"""
    return dict(load_template(TEMPLATE)["Resources"]["LifecycleTable"]["Properties"])


def create_stack() -> Stack:
    """Inside ``mock_aws``: the lifecycle table (keys, index, TTL) and the work queues."""
    table = copy.deepcopy(_table_properties())  # (each test its own: nothing it does reaches the next)
    dynamodb = boto3.client("dynamodb")
    dynamodb.create_table(
        TableName="nodecycle-lifecycle",
        BillingMode=table["BillingMode"],
        AttributeDefinitions=table["AttributeDefinitions"],
        KeySchema=table["KeySchema"],
        GlobalSecondaryIndexes=table["GlobalSecondaryIndexes"],
    )
    dynamodb.update_time_to_live(
        TableName="nodecycle-lifecycle", TimeToLiveSpecification=table["TimeToLiveSpecification"]
    )
    sqs = boto3.client("sqs")
    urls = {
        name: sqs.create_queue(QueueName=f"nodecycle-{name}")["QueueUrl"]
        for name in ("drain", "eip", "intake", "wake")
    }
    return Stack(
        table="nodecycle-lifecycle",
        drain_queue=urls["drain"],
        eip_queue=urls["eip"],
        intake_queue=urls["intake"],
        wake_queue=urls["wake"],
    )


def receive_all(queue_url: str) -> list[dict[str, Any]]:
    """Every message visible on a queue (moto ignores DelaySeconds for receive, which suits assertions)."""
    sqs = boto3.client("sqs")
    messages: list[Any] = []
    while True:
        batch = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, VisibilityTimeout=0).get(
            "Messages", []
        )
        fresh = [m for m in batch if m["MessageId"] not in {seen["MessageId"] for seen in messages}]
        if not fresh:
            return messages
        messages.extend(fresh)
