"""``nodecycle``: the command line of the project (the local sandbox, the demo, the budget, lifecycle status,
the preflight).

It is a developer and operator tool: installed by pyproject.toml, never shipped in the Lambda layer. A plain
``pip install`` gives the commands that work against a real account and cluster (``status``, ``budget``,
``doctor``); ``sandbox`` and ``demo`` need the ``sandbox`` extra. Each command's module is imported only
when that command runs, so ``nodecycle --help`` and ``nodecycle status --help`` never import moto or the
sandbox, and a missing extra is one line that says what to install.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import NoReturn

from nodecycle_cli import json_errors
from nodecycle_cli.version import installed


@dataclass(frozen=True)
class Command:
    """A subcommand: its module has ``register(commands)``, which adds its parser to ``commands`` (an
    ``add_subparsers()`` result) with ``set_defaults(run=...)``."""

    name: str
    module: str
    help: str
    extra: str | None = None  # the pip extra its imports need, if any


# Adding a command is one line here (and its module).
COMMANDS = (
    Command(
        "sandbox",
        "nodecycle_cli.sandbox",
        "run nodecycle locally (moto + a Kubernetes API server)",
        "sandbox",
    ),
    Command("demo", "nodecycle_cli.demo", "an instance refresh on the local sandbox, end to end", "sandbox"),
    Command(
        "chaos",
        "nodecycle_cli.chaos",
        "refreshes under seeded faults, each checked against the invariants; shrinks what fails",
        "sandbox",
    ),
    Command("status", "nodecycle_cli.status", "the lifecycles a stack is working on"),
    Command("budget", "nodecycle_cli.budget", "show the disruption budget, or release a slot by hand"),
    Command("doctor", "nodecycle_cli.doctor", "check a deployment: cluster access, hooks, rules, queues"),
    Command("rbac", "nodecycle_cli.rbac", "print the cluster roles the functions need (for kubectl apply)"),
)


class UsageError(Exception):
    """A command line argparse refuses, raised rather than exited on, so that ``main`` can say it in JSON too."""

    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser, self.message = parser, message

    def exit(self) -> NoReturn:
        """As argparse: the usage and the error on stderr, exit status 2."""
        argparse.ArgumentParser.error(self.parser, self.message)


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors are raised (its subcommands' parsers are of its class too)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(self, message)


def build_parser(chosen: str | None = None) -> argparse.ArgumentParser:
    """The parser, with the full arguments of the ``chosen`` command only (the others are listed by name)."""
    parser = Parser(
        prog="nodecycle",
        description="EC2 Auto Scaling lifecycle hooks for EKS nodes and Elastic IP fleets.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the tool does")
    parser.add_argument("--version", action="version", version=f"nodecycle {installed()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        if command.name == chosen:
            load(command).register(commands)
        else:
            commands.add_parser(command.name, help=command.help)
    return parser


class MissingPackage(Exception):
    """A command's module needs a package this install lacks (an extra not installed)."""


def load(command: Command) -> ModuleType:
    try:
        return importlib.import_module(command.module)
    except ModuleNotFoundError as error:
        if error.name is None or error.name.split(".")[0] in ("nodecycle", "nodecycle_cli"):
            raise
        install = f"pip install 'nodecycle[{command.extra}]'" if command.extra else "pip install nodecycle"
        raise MissingPackage(
            f"nodecycle {command.name} needs the Python package {error.name.split('.')[0]!r}, which is not "
            f"installed: {install}"
        ) from None


def chosen_command(argv: Sequence[str]) -> str | None:
    """The command named on the line (the first word that is not an option: top-level options take no value)."""
    return next((word for word in argv if not word.startswith("-")), None)


# A command whose reader stopped reading (`nodecycle status --all | head`) ends as the shell's tools killed by
# SIGPIPE do: this status, nothing said (Python ignores SIGPIPE, and would print a BrokenPipeError's traceback)
EXIT_BROKEN_PIPE = 128 + 13
EXIT_INTERRUPTED = 128 + 2


def main(argv: Sequence[str] | None = None) -> int:
    try:
        try:
            return run(argv)
        finally:
            sys.stdout.flush()  # what is still buffered meets a reader gone here, not at the interpreter's exit
    except BrokenPipeError:
        # (stdout onto /dev/null: the interpreter flushes it once more at exit)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def run(argv: Sequence[str] | None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    # A command asked for JSON says its failures on stdout in JSON too (for the script reading it), as well as
    # on stderr (for its person): json_errors
    try:
        parser = build_parser(chosen_command(words))
    except MissingPackage as missing:
        if json_errors.asked_for(None, words):
            json_errors.write(chosen_command(words), str(missing), 2)
        print(missing, file=sys.stderr)
        return 2
    try:
        args = parser.parse_args(words)
    except UsageError as usage:
        if json_errors.asked_for(None, words):
            command = usage.parser.prog.removeprefix(parser.prog).strip() or None
            json_errors.write(command, usage.message, 2)
        usage.exit()
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    if not args.verbose:
        # The HTTP clients' own retries ("Retrying (Retry(total=0, ...)) after connection broken by ..."): a
        # failure they do not get past is the command's one line (failures.explain); -v shows them
        logging.getLogger("urllib3.connectionpool").addFilter(_not_a_retry)
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        # (as the shell's tools stopped by SIGINT: 128 + 2; a script reading stdout gets why, not nothing)
        if json_errors.asked_for(args, words):
            json_errors.write(json_errors.command_of(args), "interrupted", EXIT_INTERRUPTED)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        raise  # not the command's failure: its reader's (main)
    except Exception as error:
        from nodecycle_cli.failures import explain

        reason = explain(error)
        raised = reason is None or args.verbose  # a bug, or -v: the traceback (and Python's exit status, 1)
        if json_errors.asked_for(args, words):
            said = f"{type(error).__name__}: {error}" if reason is None else reason
            json_errors.write(json_errors.command_of(args), said, 1 if raised else 2)
        if raised:
            raise
        print(f"nodecycle {args.command}: {reason}", file=sys.stderr)
        return 2


def _not_a_retry(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("Retrying (")


if __name__ == "__main__":
    sys.exit(main())
