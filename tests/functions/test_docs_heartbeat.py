"""The shortest heartbeat timeout a hook may have, as the operator reads it, is the one the functions and the
doctor enforce (``Timing.min_heartbeat_timeout_seconds``)."""

from __future__ import annotations

import re
from pathlib import Path

from nodecycle.settings import Timing
from nodecycle_cli import doctor
from nodecycle_sandbox.runner.cfn_yaml import load_template

ROOT = Path(__file__).resolve().parents[2]
PARAMETERS = load_template(ROOT / "template.yaml")["Parameters"]


def template_defaults_minimum() -> int:
    return Timing(
        heartbeat_margin_seconds=PARAMETERS["HeartbeatMarginSeconds"]["Default"],
        work_visibility_timeout_seconds=PARAMETERS["WorkVisibilityTimeoutSeconds"]["Default"],
        resume_grace_seconds=PARAMETERS["ResumeGraceSeconds"]["Default"],
        sweep_interval_minutes=PARAMETERS["SweepIntervalMinutes"]["Default"],
    ).min_heartbeat_timeout_seconds


def test_the_doctors_help_names_the_heartbeat_timeout_it_asks_of_hooks() -> None:
    # Given the hook check that `nodecycle doctor --help` describes
    stated = re.search(r"(\d+) s with the template's defaults", " ".join(str(doctor.__doc__).split()))
    # Then it names the minimum the doctor and intake enforce with the template's defaults
    assert stated, "the doctor's help names no minimum heartbeat timeout"
    assert int(stated.group(1)) == template_defaults_minimum() == 615
