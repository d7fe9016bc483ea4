"""The ``aws`` commands the docs give an operator are commands the AWS CLI takes: each names an operation of its
service (the CLI's command is the operation's name in kebab case: ``PutLifecycleHook``, ``put-lifecycle-hook``) and
each of its options is a member of that operation's input (``--heartbeat-timeout``; a boolean's ``--no-`` form) or
one of the CLI's global options. Read against botocore's service models, the ones the CLI itself is generated from:
an option misspelt, or an operation renamed in the docs, fails the command a team copies in the middle of an
incident or a removal."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import botocore.session
import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "docs/runbook.md", "docs/removing.md", "docs/migrating.md", "events/README.md")
# The CLI's options of every command (aws help topics: "global options", and the paginated commands' own)
GLOBAL = {
    "--region",
    "--output",
    "--query",
    "--profile",
    "--endpoint-url",
    "--no-cli-pager",
    "--cli-binary-format",
    "--debug",
    "--no-paginate",
    "--max-items",
    "--starting-token",
    "--page-size",
    "--cli-input-json",
}
# Commands the CLI adds to a service beside its API (awscli/customizations): not in the service's model
CUSTOM = {("logs", "tail")}
# The CLI's command names that are not the service model's (`aws service-quotas` is `service-quotas`'s own)
SERVICES = {"service-quotas": "service-quotas"}


def kebab(name: str) -> str:
    """An API name as the CLI spells it: PutLifecycleHook -> put-lifecycle-hook, DescribeDBInstances ->
    describe-db-instances."""
    return re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1-\2", name)).lower()


def commands(path: str) -> list[str]:
    """Every ``aws ...`` command of the file: the lines of its shell blocks (continuations joined) and its inline
    code, each up to a pipe or a comment, command substitutions and placeholders (``<the handler's hook>``) made a
    word."""
    text = (ROOT / path).read_text()
    found = []
    for block in re.findall(r"```(?:sh|bash)?\n(.*?)```", text, flags=re.DOTALL):
        found += [
            line.strip()
            for line in block.replace("\\\n", " ").splitlines()
            if line.strip().startswith("aws ")
        ]
    found += [" ".join(span.split()) for span in re.findall(r"`(aws\s[a-z][^`]*)`", text)]
    cut = (re.split(r"\s[|#]", command)[0] for command in found)
    return [re.sub(r"\$\([^)]*\)|<[^<>]*>", "X", command).strip() for command in cut]


@pytest.mark.parametrize("path", DOCS)
def test_each_aws_command_the_docs_give_is_an_operation_with_the_options_it_names(path: str) -> None:
    session = botocore.session.get_session()
    services = set(session.get_available_services())
    wrong = []
    for command in commands(path):
        words = shlex.split(command)
        if len(words) < 3 or (words[1], words[2]) in CUSTOM:
            continue
        service = SERVICES.get(words[1], words[1])
        if service not in services:
            wrong.append(f"{command}: no service {words[1]}")
            continue
        model = session.get_service_model(service)
        operations = {kebab(name): name for name in model.operation_names}
        if words[2] not in operations:
            wrong.append(f"{command}: {words[1]} has no command {words[2]}")
            continue
        shape = model.operation_model(operations[words[2]]).input_shape
        members = set(shape.members) if shape is not None else set()
        options = {f"--{kebab(m)}" for m in members} | {f"--no-{kebab(m)}" for m in members}
        wrong += [
            f"{command}: {words[1]} {words[2]} takes no {word}"
            for word in words[3:]
            if word.startswith("--") and word.split("=", 1)[0] not in options | GLOBAL
        ]
    assert wrong == []


def test_the_check_reads_the_docs_commands() -> None:
    # (the scan finds the commands it judges: a change of the docs' formatting could leave it nothing to read)
    given = [c for path in DOCS for c in commands(path)]
    assert len(given) > 20
    assert any("put-lifecycle-hook" in c and "--heartbeat-timeout" in c for c in given)
