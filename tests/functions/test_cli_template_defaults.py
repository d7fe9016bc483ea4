"""The CLI's copies of the template's defaults (the doctor's preflight before a stack exists, status without a
stack's parameters) are the template's: a default changed in template.yaml alone would have the doctor judge
overdue lifecycles and completion claims by the old one."""

from __future__ import annotations

from nodecycle_cli.doctor import DEFAULTS
from nodecycle_cli.status import DEFAULT_MARGIN_SECONDS, MARGIN_PARAMETER
from tests.functions.test_template_parameters import PARAMETERS


def test_the_doctors_defaults_are_the_templates() -> None:
    assert {name: str(PARAMETERS[name].get("Default")) for name in DEFAULTS} == DEFAULTS


def test_the_status_margin_default_is_the_templates() -> None:
    assert str(DEFAULT_MARGIN_SECONDS) == str(PARAMETERS[MARGIN_PARAMETER]["Default"])
