"""A product with a planted bug is caught by a small campaign (``nodecycle chaos --mutations`` checks every
planted bug; the README has its table). Apart from test_campaign.py so that the two sandboxes they start
run on different workers."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodecycle_sandbox.chaos.mutations import MUTATIONS, check_mutation

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SEED = 3  # the first seed whose first three scenarios are three kinds, two owners among them


def test_a_product_whose_budget_check_is_removed_is_caught() -> None:
    # Given a copy of the product whose budget admits every node
    mutation = next(m for m in MUTATIONS if m.name == "budget-check-removed")

    # When instance refreshes run on it
    result = check_mutation(ROOT, mutation, seed=SEED, max_scenarios=2, kinds=("refresh",), warm_up=False)

    # Then the campaign reports the budget exceeded
    assert result.caught, f"not caught in {result.scenarios_run} scenarios"
    assert result.invariant is not None
    assert "budget" in result.invariant
