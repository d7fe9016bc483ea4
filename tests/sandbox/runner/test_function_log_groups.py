"""Lambda sends a function's output with the function's role: a missing log group is created only by a role that
may create it (SAM's generated one may; the template's roles may not: CloudFormation creates their groups), and
otherwise the lines are dropped, for as long as the group is missing."""

from __future__ import annotations

from pathlib import Path

from .conftest import MakeRunner
from .test_stack_log_groups import client

TEMPLATE = """
Resources:
  Own:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/busy/
      Handler: app.handler
      Role: !GetAtt OwnRole.Arn
      LoggingConfig: {LogGroup: /aws/lambda/t/own}
  OwnRole:
    Type: AWS::IAM::Role
    Properties:
      AssumeRolePolicyDocument:
        Statement: [{Effect: Allow, Principal: {Service: lambda.amazonaws.com}, Action: sts:AssumeRole}]
      Policies:
        - PolicyName: logs
          PolicyDocument:
            Statement:
              - Effect: Allow
                Action: [logs:CreateLogStream, logs:PutLogEvents]
                Resource: arn:aws:logs:*:*:log-group:/aws/lambda/t/own:*
  Basic:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/busy/
      Handler: app.handler
"""
HANDLER = """
def handler(event, context):
    print("ran", event["n"])
    return None
"""


def test_a_missing_group_is_made_only_by_a_role_that_may_and_its_lines_are_dropped_meanwhile(
    moto_url: str, make_runner: MakeRunner, tmp_path: Path
) -> None:
    # Given a function whose role may write to its group but not create it, the group missing (never made, or
    # deleted by hand), and a function of SAM's generated role (AWSLambdaBasicExecutionRole)
    runner = make_runner(TEMPLATE, {"busy": HANDLER}, mode="process", log_dir=tmp_path / "logs")
    logs = client(moto_url, "logs")

    def messages(group: str) -> list[str]:
        try:
            return [e["message"] for e in logs.filter_log_events(logGroupName=group)["events"]]
        except logs.exceptions.ResourceNotFoundException:
            return []

    # When each runs
    assert runner.invoke("Own", {"n": 1}).ok
    assert runner.invoke("Basic", {"n": 1}).ok

    # Then Lambda made the second one's group and sent its line there; the first one's line is dropped, its
    # group never made
    basic = f"/aws/lambda/{runner.functions['Basic'].name}"
    assert runner.journal.wait_until(lambda: messages(basic), timeout=10) == ["ran 1"]
    runner.journal.wait_until(lambda: (tmp_path / "logs" / "Own.log").read_text(), timeout=10)
    made = {
        g["logGroupName"] for g in logs.describe_log_groups(logGroupNamePrefix="/aws/lambda/")["logGroups"]
    }
    assert "/aws/lambda/t/own" not in made

    # And once the group is made again (the runbook's fix), the next lines go there, not the dropped ones
    logs.create_log_group(logGroupName="/aws/lambda/t/own")
    assert runner.invoke("Own", {"n": 2}).ok
    assert runner.journal.wait_until(lambda: messages("/aws/lambda/t/own"), timeout=10) == ["ran 2"]
