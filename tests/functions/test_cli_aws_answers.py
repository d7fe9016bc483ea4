"""What an operator command says when AWS throttles it or refuses it, against the sandbox's AWS endpoint (moto
behind its fault layer, which answers each as the service does: DynamoDB's
ProvisionedThroughputExceededException, its AccessDeniedException naming the action and the caller).

A throttle that outlasted botocore's retries is no refusal: said as "AWS refused Query", it sent the operator
to look for a permission to grant where there is none missing. A refusal says what to grant, and to whom."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nodecycle_cli.main import main
from nodecycle_sandbox.aws.faults import FAULTS
from nodecycle_sandbox.aws.server import MotoServer
from nodecycle_sandbox.faults import Fault

OPERATOR_KEY = "AKIAOPERATORCLI00001"  # this module's own
STATUS = ["status", "--table", "nodecycle-LifecycleTable", "--owner", "nodecycle"]


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    server = MotoServer()
    yield server.start()
    server.stop()


@pytest.fixture
def operator(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An operator's shell on that endpoint; botocore's retries kept short (AWS_MAX_ATTEMPTS)."""
    for name, value in {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": OPERATOR_KEY,
        "AWS_SECRET_ACCESS_KEY": "secret",
        "AWS_REGION": "eu-west-1",
        "AWS_MAX_ATTEMPTS": "2",
    }.items():
        monkeypatch.setenv(name, value)
    yield
    FAULTS.disarm()


def test_a_throttled_command_is_not_said_to_be_refused(
    operator: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given DynamoDB throttling every Query of the operator's
    FAULTS.arm_for([Fault("t", "aws-throttle", target="dynamodb.Query")], seed=1, callers=[OPERATOR_KEY])

    # When they list the stack's lifecycles
    code = main(STATUS)

    # Then one line says AWS throttled the call and to try again, and nothing about a refusal
    err = capsys.readouterr().err
    assert FAULTS.counts() == {"aws-throttle": 2}
    assert code == 2
    assert err.count("\n") == 1
    assert "ProvisionedThroughputExceededException" in err
    assert "throttled" in err
    assert "refused" not in err


def test_a_refused_command_says_what_to_grant(operator: None, capsys: pytest.CaptureFixture[str]) -> None:
    # Given a service control policy that denies the operator's Query
    FAULTS.arm_for([Fault("d", "aws-denied", target="dynamodb.Query")], seed=1, callers=[OPERATOR_KEY])

    # When they list the stack's lifecycles
    code = main(STATUS)

    # Then one line names the refused call, AWS's words (the action) and that it is to be granted
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "AWS refused Query" in err
    assert "dynamodb:Query" in err
    assert "grant" in err
