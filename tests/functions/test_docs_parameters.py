"""What template.yaml's parameter descriptions tell the operator who sets them (sam deploy --guided shows them)
is what the functions check at their cold start."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nodecycle.settings import DrainSettings, SettingsError
from nodecycle_sandbox.runner.cfn_yaml import load_template

ROOT = Path(__file__).resolve().parents[2]
PARAMETERS = load_template(ROOT / "template.yaml")["Parameters"]
ENVIRONMENT = {
    "NODECYCLE_OWNER_ID": "stack-a",
    "NODECYCLE_CLUSTER_NAME": "prod",
    "NODECYCLE_RECORD_TABLE": "t",
    "NODECYCLE_DRAIN_QUEUE_URL": "q",
    "NODECYCLE_EIP_QUEUE_URL": "q",
    "NODECYCLE_WAKE_QUEUE_URL": "q",
}


def test_the_shortest_budget_holder_ttl_the_template_states_is_the_one_the_drain_function_accepts() -> None:
    # Given the shortest BudgetHolderTtlSeconds the parameter's description gives for the other defaults
    description = " ".join(PARAMETERS["BudgetHolderTtlSeconds"]["Description"].split())
    stated = re.search(r"(\d+) s with the defaults", description)
    assert stated, f"the description names no minimum: {description}"
    shortest = int(stated.group(1))
    # Then the drain function starts with it, and refuses a second less
    DrainSettings.from_env({**ENVIRONMENT, "NODECYCLE_BUDGET_HOLDER_TTL_SECONDS": str(shortest)})
    with pytest.raises(SettingsError, match="NODECYCLE_BUDGET_HOLDER_TTL_SECONDS"):
        DrainSettings.from_env({**ENVIRONMENT, "NODECYCLE_BUDGET_HOLDER_TTL_SECONDS": str(shortest - 1)})
