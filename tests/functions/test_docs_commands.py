"""The ``nodecycle`` commands docs/runbook.md, docs/removing.md and docs/migrating.md give an operator are commands the CLI
takes as written, and in the runbook (whose helpers set ``STACK``) each one that reads or changes the stack's
things names the stack: without ``--stack`` a command knows neither the stack's table and owner id nor its
``BudgetNamespace``, and ``budget release`` no longer refuses to free another owner's slot unasked."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from nodecycle_cli.main import UsageError, build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("docs/runbook.md", "docs/removing.md", "docs/migrating.md")
# What the docs' shell would put in place of its variables and helpers
VALUES = {
    "$STACK": "nodecycle",
    '"$(param BudgetNamespace)"': "nodecycle",
    '"$(param KubernetesGroup)"': "nodecycle",
}
# The commands that find the stack's things by its name (rbac renders a manifest from its options alone)
BY_STACK = ("status", "budget", "doctor")


def commands(path: str) -> list[str]:
    """Every ``nodecycle ...`` command of the file: the lines of its shell blocks, and its inline code (which
    may wrap over lines), each up to a pipe or a comment."""
    text = (ROOT / path).read_text()
    found = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL):
        found += [line for line in block.splitlines() if line.startswith("nodecycle ")]
    found += [" ".join(span.split()) for span in re.findall(r"`(nodecycle\s[^`]*)`", text)]
    return [re.split(r"\s[|#]", command)[0].strip() for command in found]


def words(command: str) -> list[str]:
    for variable, value in VALUES.items():
        command = command.replace(variable, value)
    return shlex.split(command)[1:]


@pytest.mark.parametrize("path", DOCS)
def test_each_command_the_docs_give_is_one_the_cli_takes(path: str) -> None:
    # Given every nodecycle command of the document
    given = commands(path)
    assert len(given) > 3  # the scan found them
    refused = []
    for command in given:
        argv = words(command)
        # When the CLI parses it as `nodecycle` would
        try:
            build_parser(argv[0]).parse_args(argv)
        except SystemExit as ended:  # (--version and --help end the parse, with 0)
            if ended.code:
                refused.append(command)
        except UsageError:  # (the CLI's parser raises its usage errors: main says them)
            refused.append(command)
    # Then it takes each as written
    assert not refused


def test_each_runbook_command_on_the_stack_names_the_stack() -> None:
    # Given the runbook's commands that act on a stack (its helpers set STACK; NODECYCLE_STACK is not set)
    on_stack = [c for c in commands("docs/runbook.md") if words(c)[0] in BY_STACK]
    assert len(on_stack) > 10
    # Then each names it: without it, `nodecycle budget release NODE` looks for the budget in the namespace
    # nodecycle, whatever the stack's BudgetNamespace, and frees any owner's slot with --yes
    assert [c for c in on_stack if "--stack $STACK" not in c] == []


def test_the_runbook_reads_a_lifecycles_last_error_with_status_json() -> None:
    # Given each paragraph of the runbook that sends the operator to a lifecycle's `last_error` (in its record,
    # which the status table has no column for: INSTANCE ... OUTCOME), and the status command nearest it there
    text = (ROOT / "docs/runbook.md").read_text()
    read_without = []
    for paragraph in text.split("\n\n"):
        commands_at = [
            (m.start(), " ".join(m.group(1).split()))
            for m in re.finditer(r"`(nodecycle\sstatus[^`]*)`", paragraph)
        ]
        for mention in re.finditer(r"`last_error`", paragraph):
            if commands_at:
                _, nearest = min(commands_at, key=lambda c: abs(c[0] - mention.start()))
                if "--json" not in nearest:
                    read_without.append(nearest)
    # Then that command asks for the JSON, where the field is
    assert read_without == []
