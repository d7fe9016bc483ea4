"""``nodecycle --version`` says which version of nodecycle the command is: the one to read the README's upgrade
notes against, and to compare with the stack's (its template's SemanticVersion)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from nodecycle_cli.main import main
from nodecycle_sandbox.runner.cfn_yaml import load_template

ROOT = Path(__file__).resolve().parents[2]


def test_the_version_is_the_projects(capsys: pytest.CaptureFixture[str]) -> None:
    # When the operator asks the command its version
    with pytest.raises(SystemExit) as ended:
        main(["--version"])
    # Then it says pyproject.toml's, which the template publishes too (and gives its stacks as their Version
    # output: test_cli_stack_version), and exits 0
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    template = load_template(ROOT / "template.yaml")
    published = template["Metadata"]["AWS::ServerlessRepo::Application"]
    assert ended.value.code == 0
    assert capsys.readouterr().out == f"nodecycle {project}\n"
    assert str(published["SemanticVersion"]) == project
    assert template["Outputs"]["Version"]["Value"] == project
