"""What the ``nodecycle`` commands' ``--help`` tells an operator is what they do: a default an option's help
names is the default the command uses; and the help is there however the command is run."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Iterator

from nodecycle_cli.main import COMMANDS, build_parser


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return {
        name: sub
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name, sub in action.choices.items()
    }


def command_parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command's parser with its full arguments, and those of its actions (``budget show``...)."""
    for command in COMMANDS:
        parser = subparsers(build_parser(command.name))[command.name]
        yield command.name, parser
        for action, sub in subparsers(parser).items():
            yield f"{command.name} {action}", sub


def same(named: str, default: object) -> bool:
    """Whether the help's words name the value (120 names 120.0)."""
    if isinstance(default, int | float) and not isinstance(default, bool):
        return float(named) == default
    return named == str(default)


def test_a_default_the_help_names_is_the_default_the_command_uses() -> None:
    # Given the help of each option of each command, as `nodecycle <command> --help` prints it
    named, wrong = 0, []
    for name, parser in command_parsers():
        for action in parser._actions:
            help_text = parser._get_formatter()._expand_help(action) if action.help else ""
            for default in re.findall(r"\(default:? ([^),]+)[),]", help_text):
                if default.startswith("$") or " " in default:
                    continue  # an environment variable or a description ("the usual chain")
                named += 1
                if not same(default, action.default):
                    options = "/".join(action.option_strings)
                    wrong.append(f"nodecycle {name} {options}: {help_text!r}, uses {action.default!r}")
    # Then each default named is the value the command runs with when the option is left out
    assert named > 10  # the scan read the options' help
    assert not wrong


def test_python_dash_m_nodecycle_cli_is_the_nodecycle_command() -> None:
    # Given an install whose `nodecycle` script is not on PATH (a virtualenv not activated, pip install --user)
    # When the command is run through its package, as `python -m` runs any
    ran = subprocess.run(
        [sys.executable, "-m", "nodecycle_cli", "status", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # Then it is the same command
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("usage: nodecycle status")


def test_the_doctors_help_names_the_rbac_it_compares_with_when_rbac_is_left_out() -> None:
    # Given `nodecycle doctor --help`: run from a plain install, with no deploy/ in the current directory
    doctor = subparsers(build_parser("doctor"))["doctor"]
    (option,) = [action for action in doctor._actions if "--rbac" in action.option_strings]
    help_text = doctor._get_formatter()._expand_help(option)
    # Then it names the rendering the doctor compares with without --rbac (Doctor._rbac), not a file
    assert option.default is None
    assert "nodecycle rbac" in help_text, help_text
    assert "deploy/rbac.yaml here" not in help_text


def test_each_commands_help_says_what_it_does_and_what_each_option_is() -> None:
    # Given `nodecycle <command> [<action>] --help` for every command and action (`nodecycle budget release
    # --help` printed its usage and options only: nothing said what NODE's slot release does, or when to use it)
    bare, unexplained = [], []
    for name, parser in command_parsers():
        if not (parser.description or "").strip():
            bare.append(name)
        unexplained += [
            f"nodecycle {name} {'/'.join(action.option_strings) or action.dest}"
            for action in parser._actions
            if not action.help and not isinstance(action, argparse._SubParsersAction)
        ]
    # Then each has a description, and each of its options and arguments a help line
    assert bare == []
    assert unexplained == []
