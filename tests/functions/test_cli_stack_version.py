"""A stack says which nodecycle it runs (its ``Version`` output: pyproject.toml's version, as the template
publishes it), and ``nodecycle status --stack`` shows it next to the command's own, warning when they differ: a
platform team could not tell which release a stack ran, nor that the CLI it reads the stack with is another (whose
upgrade notes, record format and budget format may not be the stack's)."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest

from nodecycle_cli.main import main
from tests.sandbox.runner.test_stack_targets import deployed  # noqa: F401 (the fixture)
from tests.support.stack import Stack

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_the_stack_template_yaml_deploys_outputs_the_projects_version(
    deployed: tuple[Any, dict[str, Any]],  # noqa: F811
) -> None:
    # Given template.yaml deployed by the sandbox's runner (its stack record as CloudFormation keeps it)
    _, clients = deployed

    # When its outputs are read as the CLI reads them
    (stack,) = clients["cloudformation"].describe_stacks(StackName="nodecycle")["Stacks"]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}

    # Then its Version is pyproject.toml's
    assert outputs["Version"] == PROJECT


@pytest.fixture
def versioned(stack: Stack) -> Callable[[str | None], None]:
    """A stack on CloudFormation (moto) naming the sandbox's table and owner, whose Version output a test sets."""

    def create(version: str | None) -> None:
        outputs = {"OwnerId": {"Value": "nodecycle"}, "LifecycleTableName": {"Value": stack.table}}
        if version is not None:
            outputs["Version"] = {"Value": version}
        body = {"Resources": {"Queue": {"Type": "AWS::SQS::Queue"}}, "Outputs": outputs}
        boto3.client("cloudformation").create_stack(StackName="nodecycle", TemplateBody=json.dumps(body))

    return create


def test_status_shows_the_stacks_version_beside_its_own(
    versioned: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a stack of this very release
    versioned(PROJECT)

    # When the operator asks for its lifecycles
    code = main(["status", "--stack", "nodecycle"])

    # Then the first line says the stack's release and the command's, and nothing is warned
    out, err = capsys.readouterr()
    assert code == 0
    assert out.splitlines()[0] == f"Stack nodecycle runs nodecycle {PROJECT} (this command: {PROJECT})"
    assert err == ""


@pytest.mark.parametrize("deployed_version", ["0.0.9", None], ids=["another-release", "no-version-output"])
def test_status_warns_when_the_stack_runs_another_release(
    versioned: Any, capsys: pytest.CaptureFixture[str], deployed_version: str | None
) -> None:
    # Given a stack of another release, or one deployed before stacks said theirs
    versioned(deployed_version)

    # When the operator asks for its lifecycles, in a table or as JSON
    code = main(["status", "--stack", "nodecycle"])
    out, err = capsys.readouterr()
    json_code = main(["status", "--stack", "nodecycle", "--json"])
    json_out, json_err = capsys.readouterr()

    # Then the lifecycles are listed all the same, and one warning names both releases and what to do; the JSON
    # stays the lifecycles alone (the warning on stderr)
    assert (code, json_code) == (0, 0)
    told = deployed_version or "(unknown: no Version output, deployed from an older template)"
    assert out.splitlines()[0] == f"Stack nodecycle runs nodecycle {told} (this command: {PROJECT})"
    assert err == json_err
    assert err.count("\n") == 1
    assert err.startswith(f"warning: stack nodecycle runs nodecycle {told}, this command is {PROJECT}")
    assert "upgrade notes" in err
    assert json.loads(json_out) == []
