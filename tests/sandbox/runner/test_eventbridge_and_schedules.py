"""EventBridge rules and schedules invoke functions asynchronously, with Lambda's retries and dead letters."""

from __future__ import annotations

import json

from .conftest import MakeRunner

TEMPLATE = """
Resources:
  Failures:
    Type: AWS::SQS::Queue
  Destination:
    Type: AWS::SQS::Queue
  Intake:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/intake/
      Handler: app.handler
      DeadLetterQueue: {Type: SQS, TargetArn: !GetAtt Failures.Arn}
      EventInvokeConfig:
        MaximumRetryAttempts: 2
        DestinationConfig:
          OnFailure: {Type: SQS, Destination: !GetAtt Destination.Arn}
      Events:
        Lifecycle:
          Type: EventBridgeRule
          Properties:
            Pattern:
              source: [aws.autoscaling]
              detail-type: [{prefix: EC2 Instance-}]
              detail: {LifecycleTransition: [{anything-but: autoscaling:TEST_NOTIFICATION}]}
  Sweeper:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/sweeper/
      Handler: app.handler
      Events:
        Sweep:
          Type: Schedule
          Properties:
            Schedule: rate(5 minutes)
"""

INTAKE = """
def handler(event, context):
    if event["detail"].get("fail"):
        raise ValueError("cannot take this one")
    return event["detail"]["LifecycleTransition"]
"""

SWEEPER = """
def handler(event, context):
    return event["detail-type"]
"""


def _event(detail_type: str, **detail: object) -> dict:
    return {
        "source": "aws.autoscaling",
        "detail-type": detail_type,
        "detail": {"LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING", **detail},
    }


def test_only_matching_events_invoke_the_rules_function(make_runner: MakeRunner) -> None:
    # Given intake behind a lifecycle-action rule
    runner = make_runner(TEMPLATE, {"intake": INTAKE, "sweeper": SWEEPER})

    # When a matching and a non-matching event are published
    runner.publish(_event("EC2 Instance-terminate Lifecycle Action"))
    runner.publish(_event("EC2 Instance State-change Notification") | {"source": "aws.ec2"})

    # Then intake runs once, for the matching one
    (invocation,) = runner.journal.wait_until(lambda: runner.journal.invocations("Intake"), timeout=5)
    assert (invocation.source, invocation.response) == (
        "rule:Lifecycle",
        "autoscaling:EC2_INSTANCE_TERMINATING",
    )
    assert runner.journal.invocations("Intake") == [invocation]


def test_a_failing_event_is_retried_twice_then_dead_lettered(make_runner: MakeRunner) -> None:
    # Given intake with a dead-letter queue and an on-failure destination, and short retry delays
    runner = make_runner(TEMPLATE, {"intake": INTAKE, "sweeper": SWEEPER}, async_retry_delays=(0.1, 0.2))

    # When an event it cannot take is published
    event = _event("EC2 Instance-launch Lifecycle Action", fail=True)
    runner.publish(event)

    # Then it ran three times, then went to both failure targets
    dead = runner.journal.wait_until(
        lambda: runner.sqs.receive_message(
            QueueUrl=runner.queue("Failures").url, MessageAttributeNames=["All"]
        ).get("Messages"),
        timeout=5,
    )
    assert [i.attempt for i in runner.journal.invocations("Intake")] == [1, 2, 3]
    assert json.loads(dead[0]["Body"]) == event
    assert dead[0]["MessageAttributes"]["ErrorMessage"]["StringValue"] == "cannot take this one"
    # the destination is written after the dead-letter queue (two sends, as Lambda makes them)
    (record,) = runner.journal.wait_until(
        lambda: runner.sqs.receive_message(QueueUrl=runner.queue("Destination").url).get("Messages"),
        timeout=5,
    )
    body = json.loads(record["Body"])
    assert body["requestContext"]["condition"] == "RetriesExhausted"
    assert body["requestContext"]["approximateInvokeCount"] == 3
    assert body["requestPayload"] == event


def test_a_schedule_fires_on_demand_and_at_its_sandbox_interval(make_runner: MakeRunner) -> None:
    # Given the sweeper's five-minute schedule run every 0.3 s in the sandbox
    runner = make_runner(TEMPLATE, {"intake": INTAKE, "sweeper": SWEEPER}, schedule_interval=0.3)

    # When some time passes, and the schedule is also fired by hand
    fired = runner.fire_schedule("Sweeper")
    runner.journal.wait_until(lambda: len(runner.journal.invocations("Sweeper")) >= 3, timeout=5)

    # Then the sweeper got scheduled events, the one fired by hand told by the id fire_schedule gave
    invocation = runner.journal.invocations("Sweeper")[0]
    assert (invocation.source, invocation.response) == ("schedule:Sweep", "Scheduled Event")
    assert invocation.event["source"] == "aws.events"
    assert [i.event["id"] for i in runner.journal.invocations("Sweeper")].count(fired) == 1
    assert runner.functions["Sweeper"].schedules[0].interval == 300
