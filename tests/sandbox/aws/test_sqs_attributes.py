"""moto's SQS as the sandbox patches it: queue attributes within the ranges SQS takes (the SQS API reference,
CreateQueue and SetQueueAttributes)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodecycle_sandbox.aws import sqs_attributes


@pytest.fixture
def sqs() -> Iterator[Any]:
    sqs_attributes.install()
    with mock_aws():
        yield boto3.client("sqs", region_name="eu-west-1")


OUT_OF_RANGE = [
    ("VisibilityTimeout", "43201"),
    ("DelaySeconds", "901"),
    ("MessageRetentionPeriod", "59"),
    ("MessageRetentionPeriod", "1209601"),
    ("ReceiveMessageWaitTimeSeconds", "21"),
]


@pytest.mark.parametrize(("attribute", "value"), OUT_OF_RANGE)
def test_a_queue_attribute_out_of_its_range_is_refused_at_creation_and_change(
    sqs: Any, attribute: str, value: str
) -> None:
    # Given an attribute value beyond what SQS takes (moto stored it)
    # When a queue is created with it, Then SQS's refusal comes and there is no queue
    with pytest.raises(sqs.exceptions.ClientError) as refused:
        sqs.create_queue(QueueName="q", Attributes={attribute: value})
    assert refused.value.response["Error"]["Code"] == "InvalidAttributeValue"
    assert refused.value.response["Error"]["Message"] == f"Invalid value for the parameter {attribute}."
    assert sqs.list_queues().get("QueueUrls", []) == []

    # and a queue's attribute set to it is refused too, the queue keeping the value it had
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    before = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[attribute])["Attributes"][attribute]
    with pytest.raises(sqs.exceptions.ClientError, match="InvalidAttributeValue"):
        sqs.set_queue_attributes(QueueUrl=url, Attributes={attribute: value})
    after = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[attribute])["Attributes"][attribute]
    assert after == before


def test_queue_attributes_at_the_ends_of_their_ranges_are_taken(sqs: Any) -> None:
    # Given each attribute at the highest value SQS takes
    attributes = {name: str(high) for name, (_, high) in sqs_attributes.RANGES.items()}

    # When a queue is created with them, Then it has them
    url = sqs.create_queue(QueueName="q", Attributes=attributes)["QueueUrl"]
    found = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=list(attributes))["Attributes"]
    assert found == attributes


@pytest.mark.parametrize("count", [0, 1001, -1])
def test_a_redrive_policy_whose_max_receive_count_is_out_of_its_range_is_refused(
    sqs: Any, count: int
) -> None:
    # Given a dead-letter queue, When a queue is created or changed with a maxReceiveCount outside 1 to 1,000 (the
    # console's "Maximum receives"; moto stored 0, with which every message received once moves on), Then SQS refuses
    # it and there is no such queue, or the queue keeps its policy
    arn = sqs.get_queue_attributes(
        QueueUrl=sqs.create_queue(QueueName="dlq")["QueueUrl"], AttributeNames=["QueueArn"]
    )["Attributes"]["QueueArn"]
    policy = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": count})
    with pytest.raises(sqs.exceptions.ClientError) as refused:
        sqs.create_queue(QueueName="work", Attributes={"RedrivePolicy": policy})
    assert refused.value.response["Error"]["Code"] == "InvalidParameterValue"
    assert "maxReceiveCount" in refused.value.response["Error"]["Message"]

    url = sqs.create_queue(
        QueueName="work",
        Attributes={"RedrivePolicy": json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 5})},
    )["QueueUrl"]
    with pytest.raises(sqs.exceptions.ClientError):
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": policy})
    kept = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])["Attributes"][
        "RedrivePolicy"
    ]
    assert json.loads(kept)["maxReceiveCount"] == 5
