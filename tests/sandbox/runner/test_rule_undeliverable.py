"""EventBridge's own call to a rule's function fails when the function was deleted, or its permission for the rule
removed, by hand: the event is then sent at once, without retries, to the target's dead-letter queue, the event
as its body with the attributes RULE_ARN, TARGET_ARN, ERROR_CODE (NO_RESOURCE, NO_PERMISSIONS) and ERROR_MESSAGE,
or dropped by a target that has none (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rule-dlq.html).
The runner took a deleted function for one throttled to nothing (Lambda retried its events for their maximum age,
then sent them to the deleted function's own failure destination), and invoked a function EventBridge no longer
had the permission to invoke."""

from __future__ import annotations

import json
import time
from typing import Any

from .conftest import MakeRunner
from .test_stack_deployment import client

# (the queue's policy lets EventBridge send it the rule's undelivered events, as the template's dead-letter queue
# policies do: one without, test_stack_dead_letter_policy.py shows, is sent nothing)
WITHOUT_POLICY = """
Resources:
  Failed:
    Type: AWS::SQS::Queue
  Undelivered:
    Type: AWS::SQS::Queue
  Worker:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/worker/
      Handler: app.handler
      Runtime: python3.13
      Timeout: 20
      EventInvokeConfig:
        MaximumRetryAttempts: 0
        MaximumEventAgeInSeconds: 60
        DestinationConfig:
          OnFailure: { Type: SQS, Destination: !GetAtt Failed.Arn }
      Events:
        Lifecycle:
          Type: EventBridgeRule
          Properties:
            Pattern: {source: [aws.autoscaling]}
            RetryPolicy: { MaximumRetryAttempts: 185, MaximumEventAgeInSeconds: 3600 }
            DeadLetterConfig: { Arn: !GetAtt Undelivered.Arn }
        Disruptions:
          Type: EventBridgeRule
          Properties:
            Pattern: {source: [aws.ec2]}
"""
TEMPLATE = (
    WITHOUT_POLICY
    + """  UndeliveredPolicy:
    Type: AWS::SQS::QueuePolicy
    Properties:
      Queues: [!Ref Undelivered]
      PolicyDocument:
        Version: "2012-10-17"
        Statement:
          - Effect: Allow
            Principal: { Service: events.amazonaws.com }
            Action: sqs:SendMessage
            Resource: !GetAtt Undelivered.Arn
            Condition:
              ArnEquals:
                aws:SourceArn: !GetAtt WorkerLifecycle.Arn
"""
)

WORKER = """
def handler(event, context):
    return "ran"
"""

EVENT = {
    "id": "e-1",
    "source": "aws.autoscaling",
    "detail-type": "EC2 Instance-terminate Lifecycle Action",
    "detail": {"EC2InstanceId": "i-0123"},
}


def messages(runner: Any, queue: str, wait: float = 0) -> list[dict[str, Any]]:
    received = client(runner, "sqs").receive_message(
        QueueUrl=runner.queue(queue).url,
        MaxNumberOfMessages=10,
        MessageAttributeNames=["All"],
        WaitTimeSeconds=int(wait),
    )
    return list(received.get("Messages", []))


def attributes(message: dict[str, Any]) -> dict[str, str]:
    return {key: value["StringValue"] for key, value in message.get("MessageAttributes", {}).items()}


def rule_arn(runner: Any, event: str) -> str:
    name = runner._deployment.rules[("Worker", event)].name
    return str(client(runner, "events").describe_rule(Name=name)["Arn"])


def test_each_rule_may_invoke_its_function_as_sam_lets_it(make_runner: MakeRunner) -> None:
    runner = make_runner(TEMPLATE, {"worker": WORKER}, sqs_sources_enabled=False)
    policy = json.loads(
        client(runner, "lambda").get_policy(FunctionName=runner.functions["Worker"].name)["Policy"]
    )
    allowed = {
        next(iter(s["Condition"]["ArnLike"].values()))
        for s in policy["Statement"]
        if s["Principal"] == {"Service": "events.amazonaws.com"} and s["Action"] == "lambda:InvokeFunction"
    }
    assert allowed == {rule_arn(runner, "Lifecycle"), rule_arn(runner, "Disruptions")}

    runner.publish(EVENT)
    assert runner.journal.wait_until(lambda: runner.journal.invocations("Worker"), timeout=10)
    assert messages(runner, "Undelivered") == []


def test_an_event_for_a_function_deleted_by_hand_goes_to_the_targets_dead_letter_queue_at_once(
    make_runner: MakeRunner,
) -> None:
    # Given the function deleted by hand (its rule and target still there)
    runner = make_runner(TEMPLATE, {"worker": WORKER}, sqs_sources_enabled=False)
    spec = runner.functions["Worker"]
    client(runner, "lambda").delete_function(FunctionName=spec.name)

    # When an event of its rule comes
    started = time.monotonic()
    runner.publish(EVENT)

    # Then EventBridge sends it to the target's dead-letter queue, without retries: the event, and why
    (message,) = messages(runner, "Undelivered", wait=5)
    assert time.monotonic() - started < 5
    assert json.loads(message["Body"]) == EVENT
    assert attributes(message) == {
        "RULE_ARN": rule_arn(runner, "Lifecycle"),
        "TARGET_ARN": spec.arn,
        "ERROR_CODE": "NO_RESOURCE",
        "ERROR_MESSAGE": f"Function not found: {spec.arn}",
    }
    # and neither Lambda's queue nor the deleted function's failure destination saw it
    time.sleep(1.5)
    assert runner.journal.invocations("Worker") == []
    assert runner.journal.throttles("Worker") == []
    assert messages(runner, "Failed") == []


def test_an_event_for_a_function_whose_permission_was_removed_goes_to_the_dead_letter_queue(
    make_runner: MakeRunner,
) -> None:
    # Given the rule's permission removed from the function's policy by hand
    runner = make_runner(TEMPLATE, {"worker": WORKER}, sqs_sources_enabled=False)
    spec = runner.functions["Worker"]
    aws = client(runner, "lambda")
    (statement,) = [
        s
        for s in json.loads(aws.get_policy(FunctionName=spec.name)["Policy"])["Statement"]
        if rule_arn(runner, "Lifecycle") in json.dumps(s)
    ]
    aws.remove_permission(FunctionName=spec.name, StatementId=statement["Sid"])

    # When an event of that rule comes
    runner.publish(EVENT)

    # Then the function is not invoked, and the event is in the target's dead-letter queue
    (message,) = messages(runner, "Undelivered", wait=5)
    assert json.loads(message["Body"]) == EVENT
    assert attributes(message)["ERROR_CODE"] == "NO_PERMISSIONS"
    assert attributes(message)["RULE_ARN"] == rule_arn(runner, "Lifecycle")
    time.sleep(1.5)
    assert runner.journal.invocations("Worker") == []

    # While the other rule, whose permission is there, still delivers
    runner.publish({**EVENT, "source": "aws.ec2", "detail-type": "EC2 Instance State-change Notification"})
    assert runner.journal.wait_until(lambda: runner.journal.invocations("Worker"), timeout=10)


def test_a_target_without_a_dead_letter_queue_drops_what_it_cannot_deliver(make_runner: MakeRunner) -> None:
    runner = make_runner(TEMPLATE, {"worker": WORKER}, sqs_sources_enabled=False)
    client(runner, "lambda").delete_function(FunctionName=runner.functions["Worker"].name)

    runner.publish({**EVENT, "source": "aws.ec2", "detail-type": "EC2 Instance State-change Notification"})

    time.sleep(1.5)
    assert messages(runner, "Undelivered") == []
    assert messages(runner, "Failed") == []
    assert runner.journal.invocations("Worker") == []
