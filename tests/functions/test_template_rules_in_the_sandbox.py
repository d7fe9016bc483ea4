"""The sandbox deploys the template as CloudFormation would: parameters that break one of its Rules are refused
before anything starts (CloudFormation validates the rules with the parameters, ahead of every resource)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodecycle_sandbox import Sandbox, SandboxOptions
from nodecycle_sandbox.runner.intrinsics import ParameterError

ROOT = Path(__file__).resolve().parents[2]


def test_a_stack_that_breaks_a_rule_of_the_template_is_refused_before_the_sandbox_starts(
    tmp_path: Path,
) -> None:
    options = SandboxOptions(
        root=ROOT, group=None, parameters={"ManagedGroups": "workers", "EipMode": "pool"}, log_dir=tmp_path
    )
    with pytest.raises(ParameterError, match="rule PoolNamed"), Sandbox(options):
        pass
