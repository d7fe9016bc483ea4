"""Credentials that expired (an SSO or assumed-role session past its hour) or that AWS does not know: every call is
answered ``ExpiredToken`` (the query protocol: CloudFormation, STS, Auto Scaling), ``ExpiredTokenException`` (the
JSON ones: DynamoDB, Lambda, EventBridge), ``InvalidClientTokenId`` or ``UnrecognizedClientException`` (keys
deleted or mistyped). The commands said "AWS answered DescribeStacks with ExpiredToken: ...", which names neither the
cause (the caller's own credentials, not the stack) nor what to do. Each command now says in one line that the
credentials are expired (or unknown) and how to renew them, exit status 2, and with --json the same on stdout.

The answers are AWS's own (HTTP 403 with the code and message each service sends), raised by every call the
command's clients make. (``budget show`` reads the kubeconfig first: without one, that is what it says.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from botocore.client import BaseClient
from botocore.exceptions import ClientError

from nodecycle_cli.main import main

ANSWERS = {
    "ExpiredToken": "The security token included in the request is expired",
    "ExpiredTokenException": "The security token included in the request is expired",
    "InvalidClientTokenId": "The security token included in the request is invalid.",
    "UnrecognizedClientException": "The security token included in the request is invalid.",
}
COMMANDS = {
    "status": ["status", "--stack", "nodecycle"],
    "doctor": ["doctor", "--stack", "nodecycle"],
}


@pytest.fixture(params=sorted(ANSWERS))
def answer(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    code = str(request.param)

    def refused(self: BaseClient, operation: str, params: Any) -> Any:
        response: Any = {
            "Error": {"Code": code, "Message": ANSWERS[code]},
            "ResponseMetadata": {"HTTPStatusCode": 403},
        }
        raise ClientError(response, operation)

    monkeypatch.setattr(BaseClient, "_make_api_call", refused)
    for name, value in {
        "AWS_ACCESS_KEY_ID": "ASIAEXPIRED000000000",
        "AWS_SECRET_ACCESS_KEY": "x",
        "AWS_SESSION_TOKEN": "expired",
        "AWS_REGION": "eu-west-1",
        "KUBECONFIG": str(tmp_path / "none"),
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("NODECYCLE_STACK", raising=False)
    return code


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_expired_or_unknown_credentials_are_said_as_such_with_what_to_do(
    answer: str, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(COMMANDS[command])

    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert answer in err
    said = "expired" if answer.startswith("Expired") else "not valid"
    assert f"AWS credentials are {said}" in err
    assert "aws sso login" in err
    assert "aws sts get-caller-identity" in err


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_with_json_stdout_says_it_too(answer: str, command: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main([*COMMANDS[command], "--json"])

    out = capsys.readouterr().out
    error = json.loads(out)["error"]
    assert code == 2
    assert error["exit_status"] == 2
    assert error["command"] == command
    assert answer in error["message"]
