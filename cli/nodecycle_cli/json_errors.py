"""A failure of a command asked for JSON, said on stdout as JSON too.

A script runs ``nodecycle status --stack S --json | jq ...``: when the command cannot run (no such stack, no
credentials, no kubeconfig, an argument it does not take) its one line for a person goes to stderr, and stdout
would be empty, which the script cannot parse or tell from a crash of the pipe. With ``--json`` (or ``-o json``)
stdout carries one error object instead, beside the non-zero exit status:

    {"error": {"command": "status", "message": "...", "exit_status": 2}}

So does ``budget show`` when the cluster has no budget to show (exit status 1).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence


def asked_for(args: argparse.Namespace | None, words: Sequence[str]) -> bool:
    """Whether the command line asks for JSON: from its parsed arguments, or, before they could be parsed (a
    usage error, a missing extra), from its words."""
    if args is not None:
        return getattr(args, "output", None) == "json" or getattr(args, "json", False) is True
    for index, word in enumerate(words):
        if len(word) >= 3 and "--json".startswith(word):  # argparse takes an option's unambiguous prefix
            return True
        if word in ("-ojson", "--output=json"):
            return True
        if word in ("-o", "--output") and words[index + 1 : index + 2] == ["json"]:
            return True
    return False


def command_of(args: argparse.Namespace) -> str:
    """The command's name as the error names it: ``status``, ``budget show``."""
    action = getattr(args, "budget_command", None)
    return f"{args.command} {action}" if action else str(args.command)


def write(command: str | None, message: str, exit_status: int) -> None:
    error = {"command": command, "message": message, "exit_status": exit_status}
    print(json.dumps({"error": error}, indent=2), file=sys.stdout, flush=True)
