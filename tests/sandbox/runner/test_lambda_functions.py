"""The runner registers the stack's functions with the sandbox's Lambda as CloudFormation creates them (settings,
reserved concurrency, asynchronous invocation settings, SQS event source mappings), so that the runbook's
``aws lambda get-function-concurrency`` / ``put-function-concurrency`` / ``list-event-source-mappings`` /
``update-event-source-mapping`` answer against the sandbox; and what an operator changes there matters: a
function throttled to 0 runs nothing, a mapping disabled by hand polls nothing, as on AWS."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from nodecycle_sandbox.aws import lambda_invoke
from nodecycle_sandbox.runner.lambda_functions import MappingRefused

from .conftest import REGION, MakeRunner
from .test_stack_deployment import client

TEMPLATE = """
Globals:
  Function:
    Runtime: python3.13
    Environment:
      Variables:
        SHARED: "yes"
Resources:
  Work:
    Type: AWS::SQS::Queue
    Properties:
      VisibilityTimeout: 30
  Failed:
    Type: AWS::SQS::Queue
  Worker:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/worker/
      Handler: app.handler
      Timeout: 20
      MemorySize: 384
      ReservedConcurrentExecutions: 3
      Environment:
        Variables:
          OWN: !Ref Work
      EventInvokeConfig:
        MaximumRetryAttempts: 1
        MaximumEventAgeInSeconds: 600
        DestinationConfig:
          OnFailure: { Type: SQS, Destination: !GetAtt Failed.Arn }
      Events:
        Queue:
          Type: SQS
          Properties:
            Queue: !GetAtt Work.Arn
            BatchSize: 2
            MaximumBatchingWindowInSeconds: 0
            FunctionResponseTypes: [ReportBatchItemFailures]
            ScalingConfig: { MaximumConcurrency: 3 }
        Lifecycle:
          Type: EventBridgeRule
          Properties:
            Pattern: {source: [aws.autoscaling]}
"""

WORKER = """
def handler(event, context):
    return {"batchItemFailures": []} if "Records" in event else "ran"
"""

EVENT = {"source": "aws.autoscaling", "detail-type": "EC2 Instance-launch Lifecycle Action", "detail": {}}


def lambda_client(runner: Any) -> Any:
    return client(runner, "lambda")


def test_each_function_is_registered_with_the_templates_settings(make_runner: MakeRunner) -> None:
    runner = make_runner(TEMPLATE, {"worker": WORKER}, sqs_sources_enabled=False)
    aws = lambda_client(runner)
    name = runner.functions["Worker"].name

    configuration = aws.get_function(FunctionName=name)["Configuration"]
    assert (configuration["Timeout"], configuration["MemorySize"]) == (20, 384)
    assert configuration["Handler"] == "app.handler"
    assert configuration["Runtime"] == "python3.13"
    assert sorted(configuration["Environment"]["Variables"]) == ["OWN", "SHARED"]
    assert configuration["Environment"]["Variables"]["OWN"] == runner.queue("Work").url
    assert aws.get_function_concurrency(FunctionName=name)["ReservedConcurrentExecutions"] == 3
    invoke_config = aws.get_function_event_invoke_config(FunctionName=name)
    assert invoke_config["MaximumRetryAttempts"] == 1
    assert invoke_config["MaximumEventAgeInSeconds"] == 600
    assert invoke_config["DestinationConfig"]["OnFailure"]["Destination"] == runner.queue("Failed").arn

    (mapping,) = aws.list_event_source_mappings(FunctionName=name)["EventSourceMappings"]
    assert mapping["EventSourceArn"] == runner.queue("Work").arn
    assert mapping["State"] == "Enabled"
    assert mapping["BatchSize"] == 2
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["ScalingConfig"] == {"MaximumConcurrency": 3}


def test_lambda_does_not_run_the_mappings_itself(make_runner: MakeRunner) -> None:
    # Given the mapping registered with the sandbox's Lambda, the runner's pollers off
    runner = make_runner(TEMPLATE, {"worker": WORKER}, sqs_sources_enabled=False)
    sqs = client(runner, "sqs")
    url = runner.queue("Work").url

    # When a message is sent to its queue
    sqs.send_message(QueueUrl=url, MessageBody="{}")

    # Then nothing received it (moto would receive a batch at each send for the mapping, and invoke the function in
    # Docker: without Docker that receive counts towards maxReceiveCount and the message drifts to the DLQ)
    attributes = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    assert attributes == {"ApproximateNumberOfMessages": "1", "ApproximateNumberOfMessagesNotVisible": "0"}
    (message,) = sqs.receive_message(QueueUrl=url, AttributeNames=["ApproximateReceiveCount"])["Messages"]
    assert message["Attributes"]["ApproximateReceiveCount"] == "1"


def test_a_function_throttled_to_zero_by_hand_runs_nothing_until_its_concurrency_is_back(
    make_runner: MakeRunner,
) -> None:
    # Given the runbook's step that stops a function: its reserved concurrency set to 0
    runner = make_runner(TEMPLATE, {"worker": WORKER})
    aws = lambda_client(runner)
    name = runner.functions["Worker"].name
    aws.put_function_concurrency(FunctionName=name, ReservedConcurrentExecutions=0)
    time.sleep(1.2)  # (Lambda applies it within seconds; the runner reads it again each second)

    # When an event and a message come
    runner.publish(EVENT)
    client(runner, "sqs").send_message(QueueUrl=runner.queue("Work").url, MessageBody="{}")
    time.sleep(1.5)

    # Then the function ran neither (throttled): the event went to its on-failure destination at once, as
    # Lambda sends an event for a function stopped at 0 (not kept in its queue); the message waits in its
    # queue, and runs once the concurrency is given back
    assert runner.journal.invocations("Worker") == []
    assert runner.journal.throttles("Worker")
    failed = client(runner, "sqs").receive_message(QueueUrl=runner.queue("Failed").url)["Messages"]
    assert [json.loads(m["Body"])["requestContext"]["condition"] for m in failed] == [
        "ZeroReservedConcurrency"
    ]
    aws.delete_function_concurrency(FunctionName=name)
    sources = runner.journal.wait_until(
        lambda: {i.source.split(":")[0] for i in runner.journal.invocations("Worker")} >= {"sqs"},
        timeout=15,
    )
    assert sources
    time.sleep(1.0)  # (an event kept in Lambda's queue would have run by now, with the message)
    assert {i.source.split(":")[0] for i in runner.journal.invocations("Worker")} == {"sqs"}


def test_a_mapping_disabled_by_hand_polls_nothing_until_enabled_again(make_runner: MakeRunner) -> None:
    # Given the worker's mapping, disabled by an operator (aws lambda update-event-source-mapping --no-enabled)
    runner = make_runner(TEMPLATE, {"worker": WORKER})
    aws = lambda_client(runner)
    (mapping,) = aws.list_event_source_mappings(FunctionName=runner.functions["Worker"].name)[
        "EventSourceMappings"
    ]
    # (its pollers' long polls under way receive nothing from the moment the disable answers: aws/sqs_mapping_polls.py)
    aws.update_event_source_mapping(UUID=mapping["UUID"], Enabled=False)

    # When a message is sent to its queue
    sqs = client(runner, "sqs")
    sqs.send_message(QueueUrl=runner.queue("Work").url, MessageBody="{}")
    time.sleep(1.5)

    # Then it stays in the queue, unreceived; enabled again, the mapping delivers it
    assert runner.journal.invocations("Worker") == []
    attributes = sqs.get_queue_attributes(
        QueueUrl=runner.queue("Work").url, AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "1"
    aws.update_event_source_mapping(UUID=mapping["UUID"], Enabled=True)
    assert runner.journal.wait_until(lambda: runner.journal.invocations("Worker"), timeout=15)


def test_the_runbooks_event_invocation_runs_the_function_as_lambda_runs_an_asynchronous_event(
    make_runner: MakeRunner,
) -> None:
    # Given the runner's functions, their Event invocations taken by the runner (as the sandbox connects them)
    runner = make_runner(TEMPLATE, {"worker": WORKER})
    aws = lambda_client(runner)
    lambda_invoke.connect(runner.invoke_event)
    try:
        # When an operator runs the function at once, as the runbook's `aws lambda invoke --invocation-type Event`
        answer = aws.invoke(
            FunctionName=runner.functions["Worker"].name, InvocationType="Event", Payload=b'{"now": true}'
        )

        # Then Lambda's answer is AWS's (202, nothing in the body, no function error: moto tried Docker and said
        # so there), and the function runs the event, from Lambda's asynchronous queue
        assert answer["StatusCode"] == 202
        assert "FunctionError" not in answer
        assert answer["Payload"].read() == b""
        (invocation,) = runner.journal.wait_until(
            lambda: runner.journal.invocations("Worker", "invoke"), timeout=10
        )
        assert (invocation.ok, invocation.event) == (True, {"now": True})

        # and a function Lambda does not have is refused as it refuses it
        with pytest.raises(ClientError) as refused:
            aws.invoke(FunctionName="no-such-function", InvocationType="Event", Payload=b"{}")
        assert refused.value.response["Error"]["Code"] == "ResourceNotFoundException"
    finally:
        lambda_invoke.connect(None)


SYNC_WORKER = """
def handler(event, context):
    if event.get("fail"):
        raise ValueError("told to fail")
    return {"ran": event["n"], "request": context.aws_request_id}
"""


def test_an_operators_invoke_runs_the_function_once_and_answers_as_lambda(make_runner: MakeRunner) -> None:
    # Given the runner's functions, their invocations taken by the runner (as the sandbox connects them), and an
    # operator's client that does not retry a throttle
    runner = make_runner(TEMPLATE, {"worker": SYNC_WORKER}, sqs_sources_enabled=False)
    aws = boto3.client(
        "lambda",
        endpoint_url=runner.endpoint_url,
        region_name=REGION,
        aws_access_key_id="AKIATESTOPERATOR0000",
        aws_secret_access_key="x",
        config=Config(retries={"total_max_attempts": 1}),
    )
    name = runner.functions["Worker"].name
    lambda_invoke.connect(runner.invoke_event, runner.invoke_sync)
    try:
        # When the operator invokes it as `aws lambda invoke --function-name ... out.json` does (RequestResponse)
        ran = aws.invoke(FunctionName=name, Payload=b'{"n": 1}')
        failed = aws.invoke(FunctionName=name, Payload=b'{"fail": true}')

        # Then Lambda ran it once each time and answered with what the handler returned, an unhandled error
        # as Lambda's error document with its FunctionError
        assert (ran["StatusCode"], "FunctionError" in ran) == (200, False)
        answered = json.loads(ran["Payload"].read())
        assert answered["ran"] == 1
        assert (failed["StatusCode"], failed["FunctionError"]) == (200, "Unhandled")
        error = json.loads(failed["Payload"].read())
        assert (error["errorType"], error["errorMessage"]) == ("ValueError", "told to fail")
        invocations = runner.journal.invocations("Worker", "invoke:sync")
        assert [(i.ok, i.request_id) for i in invocations] == [
            (True, answered["request"]),
            (False, error["requestId"]),
        ]

        # And stopped at 0, the function is not run: Lambda refuses the invocation (429), naming the reserved
        # concurrency
        lambda_client(runner).put_function_concurrency(FunctionName=name, ReservedConcurrentExecutions=0)
        time.sleep(1.2)  # (Lambda applies it within seconds; the runner reads it again each second)
        with pytest.raises(ClientError) as refused:
            aws.invoke(FunctionName=name, Payload=b'{"n": 2}')
        assert refused.value.response["Error"]["Code"] == "TooManyRequestsException"
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 429
        assert (
            dict(refused.value.response).get("Reason") == "ReservedFunctionConcurrentInvocationLimitExceeded"
        )
        assert len(runner.journal.invocations("Worker", "invoke:sync")) == 2
    finally:
        lambda_invoke.connect(None)


LOGGING_WORKER = """
import json

def handler(event, context):
    print(json.dumps({"level": "ERROR", "message": "could not drain node-1", "record_id": "i-1/terminate/t"}))
    print("a line of its own")
    return "ran"
"""


def test_a_functions_log_is_in_its_log_group_as_the_runbook_reads_it(
    make_runner: MakeRunner, tmp_path: Path
) -> None:
    # Given the functions run in their containers, writing their log files (as the sandbox runs them)
    runner = make_runner(
        TEMPLATE,
        {"worker": LOGGING_WORKER},
        mode="process",
        log_dir=tmp_path / "logs",
        sqs_sources_enabled=False,
    )
    since = int((time.time() - 60) * 1000)

    # When the function logs an error
    runner.publish(EVENT)
    runner.journal.wait_until(lambda: runner.journal.invocations("Worker"), timeout=30)

    # Then the runbook's `aws logs tail /aws/lambda/<function> --since 30m --filter-pattern ERROR` finds it (the AWS
    # CLI's FilterLogEvents), in the log group Lambda writes to; the other lines are there without the filter
    logs = client(runner, "logs")
    group = f"/aws/lambda/{runner.functions['Worker'].name}"

    def found(pattern: str) -> list[str]:
        try:
            events = logs.filter_log_events(logGroupName=group, startTime=since, filterPattern=pattern)[
                "events"
            ]
        except logs.exceptions.ResourceNotFoundException:
            return []  # (SAM's role: Lambda makes the group with the first line it sends)
        return [e["message"] for e in events]

    errors = runner.journal.wait_until(lambda: found("ERROR"), timeout=10)
    assert [json.loads(m)["message"] for m in errors] == ["could not drain node-1"]
    assert "a line of its own" in found("")


SHORT = TEMPLATE.replace("VisibilityTimeout: 30", "VisibilityTimeout: 5")


def test_a_queue_shorter_than_its_functions_timeout_fails_the_stack(make_runner: MakeRunner) -> None:
    """Lambda refuses the mapping of a queue whose visibility timeout is shorter than the function's timeout:
    CloudFormation fails the stack with its message."""
    with pytest.raises(
        MappingRefused, match="Queue visibility timeout: 5 seconds is less than Function timeout: 20"
    ):
        make_runner(SHORT, {"worker": WORKER}, min_values=True)


def test_a_sandbox_that_compresses_time_takes_a_queue_shorter_than_its_functions_timeout(
    make_runner: MakeRunner,
) -> None:
    """As the campaign's 5 s visibility timeout for 60 s functions: Lambda still shows the template's timeout."""
    runner = make_runner(SHORT, {"worker": WORKER}, min_values=False, sqs_sources_enabled=False)
    aws = lambda_client(runner)
    name = runner.functions["Worker"].name

    assert aws.get_function_configuration(FunctionName=name)["Timeout"] == 20
    (mapping,) = aws.list_event_source_mappings(FunctionName=name)["EventSourceMappings"]
    assert mapping["EventSourceArn"].endswith(":t-Work")


def vpc_template(subnets: str, security_groups: str) -> str:
    return TEMPLATE.replace(
        "      MemorySize: 384\n",
        "      MemorySize: 384\n"
        f"      VpcConfig: {{ SubnetIds: {subnets}, SecurityGroupIds: {security_groups} }}\n",
    )


def test_a_function_whose_vpc_config_has_subnets_without_security_groups_fails_the_stack(
    make_runner: MakeRunner,
) -> None:
    """Lambda refuses the function ("SubnetIds and SecurityIds must coexist or be both empty list."):
    CloudFormation fails the stack with its message."""
    with pytest.raises(ClientError, match="SubnetIds and SecurityIds must coexist"):
        make_runner(vpc_template("[subnet-0abc]", "[]"), {"worker": WORKER}, sqs_sources_enabled=False)


def test_a_function_whose_vpc_config_has_both_is_made_with_them(make_runner: MakeRunner) -> None:
    runner = make_runner(
        vpc_template("[subnet-0abc]", "[sg-0a1b]"), {"worker": WORKER}, sqs_sources_enabled=False
    )
    configuration = lambda_client(runner).get_function_configuration(
        FunctionName=runner.functions["Worker"].name
    )
    assert configuration["VpcConfig"]["SubnetIds"] == ["subnet-0abc"]
    assert configuration["VpcConfig"]["SecurityGroupIds"] == ["sg-0a1b"]
