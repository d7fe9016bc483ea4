"""What the stack reserves of the account's Lambda concurrency fits an account at AWS's default limit: Lambda keeps
100 of the account's 1,000 unreserved, and refuses a reservation past that (the function's creation fails and the
stack rolls back, half deployed), whatever the template's parameters took."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nodecycle_sandbox.runner.cfn_yaml import load_template
from nodecycle_sandbox.runner.intrinsics import whole_numbers

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = load_template(ROOT / "template.yaml")
DEFAULT_ACCOUNT_LIMIT = 1_000
UNRESERVED_MINIMUM = 100


def highest_reservations() -> dict[str, int]:
    """Each function's reserved concurrency at the highest values its parameters take."""
    found = {}
    for name, resource in TEMPLATE["Resources"].items():
        if resource["Type"] != "AWS::Serverless::Function":
            continue
        reserved: Any = resource["Properties"]["ReservedConcurrentExecutions"]
        if isinstance(reserved, Mapping):
            taken = whole_numbers(TEMPLATE["Parameters"][reserved["Ref"]])
            assert taken is not None, f"{name}: {reserved} takes no stated range"
            reserved = taken[-1]
        found[name] = int(reserved)
    return found


def test_every_function_reserves_concurrency() -> None:
    assert set(highest_reservations()) == {
        "IntakeFunction",
        "DrainFunction",
        "WakeFunction",
        "EipFunction",
        "SweeperFunction",
    }


def test_the_most_the_stack_can_reserve_leaves_the_unreserved_minimum_of_an_account_at_the_default_limit() -> (
    None
):
    # Given the highest DrainConcurrency and WakeConcurrency the template takes, and the fixed reservations,
    reserved = highest_reservations()
    # Then Lambda takes them all in an account at the default limit that reserves nothing else
    assert sum(reserved.values()) <= DEFAULT_ACCOUNT_LIMIT - UNRESERVED_MINIMUM, reserved
