"""What the ``nodecycle`` commands' ``--help`` tells an operator is what they do: a default an option's help
names is the default the command uses."""

from __future__ import annotations

import argparse
import re
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
