"""The sandbox's Lambda refuses a reserved concurrency that leaves the account less than its unreserved minimum, as
Lambda does at an account's default limit (1,000 concurrent executions, 100 kept unreserved): a deployment that
would be rolled back in AWS fails in the sandbox too."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from nodecycle_sandbox.runner import Runner

from .conftest import REGION, MakeRunner

ROOT = Path(__file__).resolve().parents[3]

TEMPLATE = """
Parameters:
  Reserved: {Type: String, Default: "10"}
Resources:
  Work:
    Type: AWS::SQS::Queue
  Busy:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/busy/
      Handler: app.handler
      ReservedConcurrentExecutions: !Ref Reserved
"""
HANDLER = """
def handler(event, context):
    return None
"""


def test_a_reservation_past_the_accounts_unreserved_minimum_fails_the_deployment(
    make_runner: MakeRunner,
) -> None:
    with pytest.raises(ClientError, match="below its minimum value of \\[100\\]"):
        make_runner(TEMPLATE, {"busy": HANDLER}, parameters={"Reserved": "901"})


def test_the_most_an_account_at_the_default_limit_takes_is_deployed(make_runner: MakeRunner) -> None:
    runner = make_runner(TEMPLATE, {"busy": HANDLER}, parameters={"Reserved": "900"})
    assert runner.functions["Busy"].reserved_concurrency == 900


def test_the_stack_at_its_highest_concurrency_fits_an_account_that_reserves_nothing_else(
    moto_url: str,
) -> None:
    # Given the template deployed with the highest DrainConcurrency and WakeConcurrency it takes
    def stack(name: str, parameters: dict[str, str]) -> Runner:
        return Runner(
            template=ROOT / "template.yaml",
            endpoint_url=moto_url,
            region=REGION,
            stack_name=name,
            parameters={"ManagedGroups": "workers", "CreateAccessEntries": "false", **parameters},
            mode="inline",
            sqs_sources_enabled=False,
            schedules_enabled=False,
        )

    highest = {"DrainConcurrency": "800", "WakeConcurrency": "50"}
    try:
        with stack("big", highest) as big:
            # Then Lambda took its 871 reserved executions
            assert sum(s.reserved_concurrency or 0 for s in big.functions.values()) == 871
            # and a second stack of the defaults (45 more) no longer fits the account: its deployment fails
            with pytest.raises(ClientError, match="UnreservedConcurrentExecution below its minimum"):
                stack("small", {}).start()
    finally:
        urllib.request.urlopen(urllib.request.Request(f"{moto_url}/moto-api/reset", method="POST")).close()
