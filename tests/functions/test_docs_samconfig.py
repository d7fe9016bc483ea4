"""samconfig.toml's example of ``parameter_overrides`` (commented out: the answers ``sam deploy --guided`` saves go
there) is what a team copies for a large cluster: uncommented, SAM reads from it the values it shows, a node
selector with blanks whole, and the template takes each."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from nodecycle_sandbox.runner.cfn_yaml import load_template
from nodecycle_sandbox.runner.intrinsics import check_parameters

ROOT = Path(__file__).resolve().parents[2]


def test_the_example_overrides_reach_the_stack_whole_and_the_template_takes_them() -> None:
    from samcli.cli.types import CfnParameterOverridesType  # type: ignore[import-untyped]  # (SAM ships no types)

    # Given the example, uncommented, as the deploy section's own line
    (line,) = re.findall(
        r"^# (parameter_overrides = .*)$", (ROOT / "samconfig.toml").read_text(), re.MULTILINE
    )
    overrides = tomllib.loads(line)["parameter_overrides"]
    # When SAM reads it as `sam deploy` does (a value not in its double quotes is cut at its first blank)
    read = CfnParameterOverridesType().convert(overrides, None, None)
    # Then the selector is whole, and the template's patterns and rules take every value
    assert read["BudgetNodeSelector"] == "eks.amazonaws.com/nodegroup in (nodes-general,nodes-spot)"
    assert len(read) == overrides.count("=") - read["BudgetNodeSelector"].count("=")
    check_parameters(load_template(ROOT / "template.yaml"), read)
