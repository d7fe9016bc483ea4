"""The seeded fault campaign, small enough for every change: a few scenarios under faults break no
invariant, and a product with a planted bug is caught.

The large runs are `nodecycle chaos --scenarios K --seed S` and `nodecycle chaos --mutations` (README).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nodecycle_sandbox.chaos import invariants, run_campaign
from nodecycle_sandbox.chaos.mutations import MUTATIONS, check_mutation
from nodecycle_sandbox.chaos.plan import Scenario
from nodecycle_sandbox.chaos.world import World
from nodecycle_sandbox.faults import Fault

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SEED = 3  # the first seed whose first three scenarios are three kinds, two owners among them


def test_a_small_campaign_under_faults_breaks_no_invariant() -> None:
    # Given the scenarios and fault plans that seed 11 draws
    # When they run to quiescence on one sandbox
    report = run_campaign(scenarios=3, seed=SEED, root=ROOT, shrink=False, warm_up=False)

    # Then faults were injected, every scenario was judged, and no invariant was violated
    assert report.scenarios == 3
    assert sum(report.faults.values()) > 0
    assert report.ok, report.summary()


def test_a_product_whose_budget_check_is_removed_is_caught() -> None:
    # Given a copy of the product whose budget admits every node
    mutation = next(m for m in MUTATIONS if m.name == "budget-check-removed")

    # When instance refreshes run on it
    result = check_mutation(ROOT, mutation, seed=SEED, max_scenarios=2, kinds=("refresh",), warm_up=False)

    # Then the campaign reports the budget exceeded
    assert result.caught, f"not caught in {result.scenarios_run} scenarios"
    assert result.invariant is not None
    assert "budget" in result.invariant


def test_a_lost_work_message_is_repaired_by_the_sweepers_schedule() -> None:
    # Given a scenario whose only sweeps are the world's schedule, and whose first drain message is lost
    scenario = Scenario(
        seed=0,
        index=0,
        kind="terminate",
        stacks=("a",),
        size=3,
        keep=3,
        terminate=1,
        min_healthy=0,
        replicas=3,
        shutdown=0.3,
        lost_kubelet_at=None,
        sweeps=(),
        faults=(Fault("f1", "sqs-drop", "DrainQueue", limit=1),),
    )

    # When it runs to quiescence
    with World(root=ROOT, warm_up=False) as world:
        observation = world.run(scenario)

    # Then the message was lost, and the lifecycle was kept alive and resumed before its hook ran out
    assert [f.kind for f in observation.firings] == ["sqs-drop"]
    assert observation.quiescent, observation.left_over
    assert invariants.check(observation) == []
    assert {a.outcome for a in observation.actions} == {"completed"}, observation.actions
