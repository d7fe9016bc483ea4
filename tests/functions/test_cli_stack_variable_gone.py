"""A stack that ``$NODECYCLE_STACK`` names and CloudFormation does not have (deleted: docs/removing.md has the
operator free a slot with ``nodecycle budget release NODE --namespace NS`` after ``sam delete``; or a typo in a
profile) is said to come from the variable, with the way out: the line said "no CloudFormation stack 'gone' ...
(pass --region, or the name `sam deploy` was given)" about a name the operator never typed, and ``budget``
commands, which need no stack with ``--namespace``, could not run at all. CloudFormation (moto) answers an
unknown stack as AWS does: a ValidationError."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from moto import mock_aws

from nodecycle_cli.main import main

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""


@pytest.fixture
def shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An operator's shell whose NODECYCLE_STACK names a stack since deleted; AWS is moto in-process."""
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    for name, value in {
        "AWS_ACCESS_KEY_ID": "AKIAOPERATORSTACKVAR",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "AWS_REGION": "eu-west-1",
        "NODECYCLE_STACK": "gone",
        "KUBECONFIG": str(tmp_path / "kubeconfig"),
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        yield


@pytest.mark.parametrize(
    "command",
    [
        ["status"],
        ["doctor"],
        ["budget", "show"],
        ["budget", "release", "ip-10-0-0-1", "--namespace", "nodecycle"],
    ],
)
def test_a_stack_the_variable_names_and_aws_does_not_have_names_the_variable(
    shell: None, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # When the operator runs the command without --stack
    code = main(command)
    # Then one line says the name came from $NODECYCLE_STACK, and how to run without it
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "no CloudFormation stack 'gone'" in err
    assert "$NODECYCLE_STACK" in err
    assert "unset NODECYCLE_STACK" in err


def test_a_stack_named_on_the_line_is_not_said_to_come_from_the_variable(
    shell: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # When the operator names the stack themself
    code = main(["status", "--stack", "typo"])
    # Then the line is about that name alone
    err = capsys.readouterr().err
    assert code == 2
    assert "no CloudFormation stack 'typo'" in err
    assert "NODECYCLE_STACK" not in err
