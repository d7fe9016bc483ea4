"""An asynchronous event whose invocation failed is retried (MaximumRetryAttempts) only while it is younger than
its MaximumEventAgeInSeconds: "the maximum age of a request that Lambda sends to a function for processing";
older, it goes to the failure targets (condition EventAgeExceeded). The runner held the age against throttled
events only: a failed one was retried at any age. (template.yaml leaves the age at its default, 6 hours, which
its retries, 2 for intake and 0 for the sweeper, a minute and two apart, never reach.)"""

from __future__ import annotations

import json

from .conftest import MakeRunner

TEMPLATE = """
Resources:
  Destination:
    Type: AWS::SQS::Queue
  Intake:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/intake/
      Handler: app.handler
      Timeout: 30
      EventInvokeConfig:
        MaximumRetryAttempts: 2
        MaximumEventAgeInSeconds: 60
        DestinationConfig:
          OnFailure: {Type: SQS, Destination: !GetAtt Destination.Arn}
      Events:
        Lifecycle:
          Type: EventBridgeRule
          Properties:
            Pattern: {source: [aws.autoscaling]}
"""

FAILING = """
def handler(event, context):
    raise RuntimeError("the table is throttled")
"""


def test_a_failed_event_is_not_retried_past_its_maximum_age(make_runner: MakeRunner) -> None:
    # Given a function whose events live 60 s (1 s in the sandbox) and are retried after 60 s, then 120 s (1 s,
    # then 2 s), that fails each event
    runner = make_runner(TEMPLATE, {"intake": FAILING}, schedules_enabled=False)

    # When an event fails
    runner.publish({"source": "aws.autoscaling", "detail-type": "x", "detail": {"name": "late"}})

    # Then its retry would come when it is older than its maximum age: it goes to the on-failure destination
    # as EventAgeExceeded after its one invocation, not retried
    url = runner.queue("Destination").url
    (record,) = runner.journal.wait_until(
        lambda: runner.sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1).get("Messages", []), timeout=15
    )
    body = json.loads(record["Body"])
    assert (body["requestContext"]["condition"], body["requestContext"]["approximateInvokeCount"]) == (
        "EventAgeExceeded",
        1,
    )
    assert [i.attempt for i in runner.journal.invocations("Intake")] == [1]
