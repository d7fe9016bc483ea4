"""``$NODECYCLE_STACK`` is a default, not an order: ``--table`` and ``--owner`` given on the line name another
stack's lifecycles (a blue/green pair, the old stack of a migration), and a refusal that came from the variable
names it. And a command asked for JSON that is interrupted (Ctrl-C) says so on stdout in JSON, as its other
failures do."""

from __future__ import annotations

import argparse
import json
from datetime import timedelta

import boto3
import pytest

from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle_cli import status as status_cli
from nodecycle_cli.main import main
from tests.functions.test_cli_status import record
from tests.support.stack import Stack


def deploy(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> DynamoRecordStore:
    """Stack nodecycle (owner nodecycle) set as the environment's, its table holding a lifecycle of its own and
    one of owner blue (a second stack sharing the table)."""
    store = DynamoRecordStore(stack.table, ttl=timedelta(days=1), dynamodb=boto3.client("dynamodb"))
    for index, owner in ((1, "nodecycle"), (2, "blue")):
        store.create(
            record(index, f"{index:08d}-1111-4111-8111-{'1' * 12}").model_copy(update={"owner": owner})
        )
    template = json.dumps(
        {
            "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
            "Outputs": {"OwnerId": {"Value": "nodecycle"}, "LifecycleTableName": {"Value": stack.table}},
        }
    )
    boto3.client("cloudformation").create_stack(StackName="nodecycle", TemplateBody=template)
    monkeypatch.setenv("NODECYCLE_STACK", "nodecycle")
    monkeypatch.delenv("NODECYCLE_OWNER_ID", raising=False)
    return store


def test_table_and_owner_on_the_line_win_over_the_environments_stack(
    stack: Stack, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    deploy(stack, monkeypatch)

    # When the operator, in a shell where $NODECYCLE_STACK names stack nodecycle, asks for owner blue's lifecycles
    code = main(["status", "--table", stack.table, "--owner", "blue", "--json"])

    # Then they are listed: the line's table and owner are what was asked for, the variable only a default
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    lifecycles = json.loads(out)
    assert [lifecycle["owner"] for lifecycle in lifecycles] == ["blue"]


def test_a_refusal_that_comes_from_the_environments_stack_names_the_variable(
    stack: Stack, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    deploy(stack, monkeypatch)

    # When only --owner is given (the table would be the stack's, whose own lifecycles would read as blue's)
    code = main(["status", "--owner", "blue"])

    # Then it is refused, and the line says the stack came from $NODECYCLE_STACK (the operator never typed it)
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "--owner blue" in err
    assert "$NODECYCLE_STACK" in err


def test_a_stack_given_on_the_line_still_refuses_a_contradicting_owner(
    stack: Stack, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    deploy(stack, monkeypatch)

    code = main(["status", "--stack", "nodecycle", "--table", stack.table, "--owner", "blue"])

    err = capsys.readouterr().err
    assert code == 2
    assert "--owner blue is not stack nodecycle's" in err
    assert "$NODECYCLE_STACK" not in err  # the operator typed it


@pytest.mark.parametrize("json_flag", [["--json"], ["-o", "json"]])
def test_an_interrupted_command_asked_for_json_says_so_in_json(
    stack: Stack, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, json_flag: list[str]
) -> None:
    # Given a command interrupted while it runs (Ctrl-C: SIGINT, a KeyboardInterrupt)
    def interrupted(args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(status_cli, "run", interrupted)

    # When it was asked for JSON
    code = main(["status", *json_flag])

    # Then it exits 130, as an interrupted command does, and its stdout is an error object saying so
    out = capsys.readouterr().out
    assert code == 130
    assert json.loads(out) == {"error": {"command": "status", "message": "interrupted", "exit_status": 130}}


def test_an_interrupted_command_not_asked_for_json_writes_nothing_on_stdout(
    stack: Stack, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(status_cli, "run", interrupted)

    assert main(["status"]) == 130
    assert capsys.readouterr().out == ""
