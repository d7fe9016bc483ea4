"""On Lambda each function's containers call AWS with its own role's credentials. The runner's inline mode runs
every function in the test's process, each invocation with its function's environment (its access key): the
calls of each must still be authorized as that function's role, or a test run inline checks a function's calls
against another function's policy (a permission its own role lacks, hidden by a broader one)."""

from __future__ import annotations

import json

import boto3
import pytest

from nodecycle_sandbox.iam.identities import IDENTITIES
from nodecycle_sandbox.runner import Runner
from tests.sandbox.iam.test_enforcement import ACCOUNT, MANAGED, ROOT

# (the template deployed by an inline runner, moto in this process: its fixture, one per module that uses it)
from tests.sandbox.iam.test_enforcement import deployed as deployed


@pytest.fixture(autouse=True)
def own_default_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """The handlers run here make boto3's default session with their credentials: put the one before back."""
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)


def test_each_function_run_inline_calls_aws_as_its_own_role(deployed: tuple[str, Runner]) -> None:
    _, runner = deployed
    # Given the intake function has run in this process and called AWS (a terminate action's event)
    event = json.loads((ROOT / "events" / "eventbridge-terminate.json").read_text())
    event["detail"]["AutoScalingGroupName"] = MANAGED
    assert runner.invoke("IntakeFunction", event).api_calls
    seen = len(IDENTITIES.journal())

    # When the sweeper runs next, in the same process
    sweep = runner.invoke(
        "SweeperFunction", json.loads((ROOT / "events" / "sweeper-schedule.json").read_text())
    )

    # Then every call it made was authorized as the sweeper's role (before: as the intake function's, and its
    # listing of the open lifecycles refused: dynamodb:Query is not in the intake role's policy)
    assert sweep.api_calls
    principals = {entry.principal for entry in IDENTITIES.journal()[seen:]}
    assert principals == {f"arn:aws:iam::{ACCOUNT}:role/nodecycle-SweeperFunctionRole"}
