"""Lambda refuses an SQS mapping whose queue's visibility timeout is shorter than the function's timeout, and a
function timeout raised past the visibility timeout of a queue it is mapped to ("InvalidParameterValueException:
Queue visibility timeout: 30 seconds is less than Function timeout: 60 seconds", as a deployment meets it): a batch still running when its messages show again is delivered twice. moto took both."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from nodecycle_sandbox.aws.install import install
from tests.sandbox.aws.conftest import REGION, worker_function


@pytest.fixture
def aws() -> Iterator[dict[str, Any]]:
    install()
    with mock_aws():
        awslambda = worker_function(timeout=60)
        yield {"lambda": awslambda, "sqs": boto3.client("sqs", region_name=REGION)}


def queue_arn(sqs: Any, name: str, visibility: int) -> str:
    url = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": str(visibility)})["QueueUrl"]
    return str(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"])


def test_a_mapping_of_a_queue_whose_visibility_timeout_is_shorter_than_the_functions_is_refused(
    aws: dict[str, Any],
) -> None:
    short = queue_arn(aws["sqs"], "short", 30)

    with pytest.raises(ClientError) as refused:
        aws["lambda"].create_event_source_mapping(FunctionName="worker", EventSourceArn=short)

    assert refused.value.response["Error"]["Code"] == "InvalidParameterValueException"
    assert refused.value.response["Error"]["Message"] == (
        "Queue visibility timeout: 30 seconds is less than Function timeout: 60 seconds"
    )
    assert aws["lambda"].list_event_source_mappings(FunctionName="worker")["EventSourceMappings"] == []
    # (as long as the function's timeout, it is taken)
    aws["lambda"].create_event_source_mapping(
        FunctionName="worker", EventSourceArn=queue_arn(aws["sqs"], "even", 60)
    )


def test_a_function_timeout_raised_past_its_queues_visibility_timeout_is_refused(aws: dict[str, Any]) -> None:
    aws["lambda"].create_event_source_mapping(
        FunctionName="worker", EventSourceArn=queue_arn(aws["sqs"], "work", 150)
    )

    with pytest.raises(ClientError) as refused:
        aws["lambda"].update_function_configuration(FunctionName="worker", Timeout=200)

    assert refused.value.response["Error"]["Code"] == "InvalidParameterValueException"
    assert (
        "Queue visibility timeout: 150 seconds is less than Function timeout: 200 seconds"
        in (refused.value.response["Error"]["Message"])
    )
    assert aws["lambda"].get_function_configuration(FunctionName="worker")["Timeout"] == 60
    aws["lambda"].update_function_configuration(FunctionName="worker", Timeout=150)


def test_the_runner_tags_what_the_sandboxs_lambda_lets_through() -> None:
    from nodecycle_sandbox.aws import lambda_mappings
    from nodecycle_sandbox.runner import lambda_functions

    assert lambda_functions.SHORT_VISIBILITY_TAG == lambda_mappings.SHORT_VISIBILITY_TAG


@pytest.mark.parametrize(
    ("settings", "code", "says"),
    [
        (
            {"FunctionResponseTypes": ["ReportBatchItemFailure"]},
            "ValidationException",
            "functionResponseTypes",
        ),
        (
            {"ScalingConfig": {"MaximumConcurrency": 1001}},
            "ValidationException",
            "less than or equal to 1000",
        ),
        (
            {"BatchSize": 20},
            "InvalidParameterValueException",
            "Maximum batch window in seconds must be greater than 0",
        ),
        (
            {"BatchSize": 20, "MaximumBatchingWindowInSeconds": 0},
            "InvalidParameterValueException",
            "Maximum batch window in seconds must be greater than 0",
        ),
    ],
)
def test_a_mapping_lambda_refuses_is_refused_at_its_creation_and_update(
    aws: dict[str, Any], settings: dict[str, Any], code: str, says: str
) -> None:
    # Lambda's CreateEventSourceMapping/UpdateEventSourceMapping (botocore's lambda model: FunctionResponseTypes
    # enum [ReportBatchItemFailures], ScalingConfig.MaximumConcurrency 2 to 1000; a batch over 10 of a standard
    # queue needs a batching window of at least 1 s); moto took each
    work = queue_arn(aws["sqs"], "work", 150)

    with pytest.raises(ClientError) as refused:
        aws["lambda"].create_event_source_mapping(FunctionName="worker", EventSourceArn=work, **settings)
    assert refused.value.response["Error"]["Code"] == code
    assert says in refused.value.response["Error"]["Message"]
    assert aws["lambda"].list_event_source_mappings(FunctionName="worker")["EventSourceMappings"] == []

    uuid = aws["lambda"].create_event_source_mapping(
        FunctionName="worker", EventSourceArn=work, BatchSize=10
    )["UUID"]
    with pytest.raises(ClientError) as refused:
        aws["lambda"].update_event_source_mapping(UUID=uuid, **settings)
    assert refused.value.response["Error"]["Code"] == code
    assert aws["lambda"].get_event_source_mapping(UUID=uuid)["BatchSize"] == 10
    # (what Lambda takes is taken)
    aws["lambda"].update_event_source_mapping(
        UUID=uuid,
        BatchSize=20,
        MaximumBatchingWindowInSeconds=1,
        FunctionResponseTypes=["ReportBatchItemFailures"],
        ScalingConfig={"MaximumConcurrency": 1000},
    )
