"""``nodecycle sandbox`` and ``nodecycle demo`` refuse a ``--parameter`` that is not NAME=VALUE as a usage error,
before anything starts: the demo printed "1/4 starting the sandbox" and spent its start-up first, then said the
option was malformed, which argparse can tell from the command line alone."""

from __future__ import annotations

import pytest

from nodecycle_cli.main import UsageError, build_parser


@pytest.mark.parametrize("command", ["sandbox", "demo"])
@pytest.mark.parametrize("given", ["DrainTimeoutSeconds", "=300"])
def test_a_parameter_without_its_name_and_value_is_a_usage_error(command: str, given: str) -> None:
    # When the command line gives a --parameter without NAME=VALUE
    with pytest.raises(UsageError) as refused:
        build_parser(command).parse_args([command, "--parameter", given])
    # Then the parser refuses it, naming the option and what it takes
    assert "--parameter" in refused.value.message
    assert "NAME=VALUE" in refused.value.message
    assert repr(given) in refused.value.message


@pytest.mark.parametrize("command", ["sandbox", "demo"])
def test_a_value_may_hold_an_equals_sign(command: str) -> None:
    # (a label selector: BudgetNodeSelector=tier=web)
    args = build_parser(command).parse_args([command, "--parameter", "BudgetNodeSelector=tier=web"])
    assert args.parameter == ["BudgetNodeSelector=tier=web"]
