"""A command asked for JSON (``--json``, ``-o json``) answers in JSON on stdout when it fails too: a script that
reads its stdout (``nodecycle status --stack S --json | jq``) gets an error object it can parse, and a non-zero
exit status, not an empty stdout and a line of text on stderr meant for a person (which is still written).

Every command that takes ``--json`` is checked, each where it fails before its own output: a stack that does not
exist, no kubeconfig, an argument it does not take, and a bug (the traceback stays, after the JSON)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws

from nodecycle_cli import status as status_cli
from nodecycle_cli.main import COMMANDS, build_parser, main

# Each command that takes --json, with a way of running it that fails before its output, and what its error says
FAILING = {
    "status": (["status", "--stack", "nodecycle-typo"], "no CloudFormation stack 'nodecycle-typo'"),
    "doctor": (["doctor", "--stack", "nodecycle-typo"], "no CloudFormation stack 'nodecycle-typo'"),
    "budget show": (["budget", "show"], "no usable kubeconfig"),
}


@pytest.fixture
def account(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    for variable in ("NODECYCLE_STACK", "NODECYCLE_RECORD_TABLE", "NODECYCLE_OWNER_ID"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    with mock_aws():
        yield


def error_of(stdout: str) -> dict[str, Any]:
    """The error object of a command's stdout, which must be one JSON document and nothing else."""
    document = json.loads(stdout)
    assert set(document) == {"error"}, document
    error: dict[str, Any] = document["error"]
    return error


def commands_with_json() -> set[str]:
    """Every command (and budget action) whose parser takes --json."""
    found = set()
    for command in COMMANDS:
        parser = build_parser(command.name)
        (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        chosen = commands.choices[command.name]
        actions = [a for a in chosen._actions if isinstance(a, argparse._SubParsersAction)]
        parsers = (
            {command.name: chosen}
            if not actions
            else {f"{command.name} {name}": sub for name, sub in actions[0].choices.items()}
        )
        for name, sub in parsers.items():
            if any("--json" in a.option_strings for a in sub._actions):
                found.add(name)
    return found


def test_every_command_that_takes_json_is_checked_here() -> None:
    assert commands_with_json() == set(FAILING)


@pytest.mark.parametrize(
    ("command", "json_flag"),
    [
        *((command, ["--json"]) for command in sorted(FAILING)),
        # (the doctor takes --json only)
        ("status", ["-o", "json"]),
        ("budget show", ["-o", "json"]),
    ],
)
def test_a_command_asked_for_json_that_cannot_run_says_why_in_json_on_stdout(
    account: None, capsys: pytest.CaptureFixture[str], command: str, json_flag: list[str]
) -> None:
    argv, reason = FAILING[command]

    # When the command, asked for JSON, cannot run
    code = main([*argv, *json_flag])

    # Then its stdout is an error object that says why, its exit status the one of a command that could not run,
    # and its stderr still the line for a person
    out, err = capsys.readouterr()
    error = error_of(out)
    assert code == 2
    assert error["exit_status"] == 2
    assert error["command"] == command
    assert reason in error["message"]
    assert reason in err


def test_a_command_not_asked_for_json_writes_nothing_on_stdout_when_it_cannot_run(
    account: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["status", "--stack", "nodecycle-typo"])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert err.startswith("nodecycle status: no CloudFormation stack 'nodecycle-typo'")


def test_an_argument_a_command_asked_for_json_does_not_take_is_said_in_json(
    account: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # When a command asked for JSON is given an argument it does not take
    with pytest.raises(SystemExit) as usage:
        main(["status", "--json", "--stak", "nodecycle"])

    # Then it exits as argparse does (2, its usage on stderr), and its stdout says so in JSON
    out, err = capsys.readouterr()
    assert usage.value.code == 2
    error = error_of(out)
    assert error["exit_status"] == 2
    assert "unrecognized arguments: --stak nodecycle" in error["message"]
    assert err.startswith("usage: nodecycle")


def test_a_bug_in_a_command_asked_for_json_is_an_error_object_and_its_traceback(
    account: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a command with a bug (nothing the environment causes: no one-line reason for it)
    def broken(args: argparse.Namespace) -> int:
        raise KeyError("OwnerId")

    monkeypatch.setattr(status_cli, "run", broken)

    # When it runs asked for JSON, the bug still raises (its traceback is what to report)...
    with pytest.raises(KeyError):
        main(["status", "--json"])

    # ...and stdout has said that the command failed, and how
    error = error_of(capsys.readouterr().out)
    assert error["command"] == "status"
    assert error["exit_status"] == 1
    assert "KeyError" in error["message"]
