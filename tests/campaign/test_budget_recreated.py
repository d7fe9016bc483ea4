"""The budget ConfigMap deleted and created again empty in the middle of a story (chaos/outages.py's
``budget-recreated``: ``kubectl replace --force -f deploy/rbac.yaml``, an operator resetting a budget that looks
stuck). Every holder and waiter is forgotten at once: the first write after it seeds the drains in progress the nodes
show (domain/budget/seed.py), a node granted a slot but not yet cordoned loses it, and the line is lost. The judges
hold under it: the budget (invariant 1), precedence (9), and ownership (3: the seed's holders of another owner are no
grant, and nothing forgotten with the ConfigMap was removed by the writer after it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nodecycle_sandbox.chaos import invariants
from nodecycle_sandbox.chaos.world import World
from nodecycle_sandbox.faults import Fault
from tests.campaign.scenarios import one_terminate

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    with World(root=ROOT, warm_up=False) as started:
        yield started


def test_a_budget_configmap_created_again_mid_scale_in_breaks_no_invariant(world: World) -> None:
    # Given a scale-in of 3 -> 0 (limits: 2 nodes at once, 1 per zone: drains hold slots, others wait in line) whose
    # budget ConfigMap is deleted and created again empty 2 s in
    scenario = one_terminate(
        Fault("f1", "budget-recreated", "configmaps", start=2.0, stop=2.5, limit=1),
        kind="scale-in",
        keep=0,
        node_removal=1.0,
        pod_gc_quarantine=1.0,
    )

    # When it runs to quiescence
    observation = world.run(scenario)

    # Then the ConfigMap was created again, the drains went on from what their nodes show, every action completed,
    # and no invariant was violated
    assert [f.kind for f in observation.firings] == ["budget-recreated"], observation.firings
    deleted = [
        e for e in observation.history if e.kind == "ConfigMap" and e.removed and e.name == "nodecycle-budget"
    ]
    assert deleted, "the budget ConfigMap was not deleted"
    assert observation.quiescent, observation.left_over
    assert invariants.check(observation) == []
    assert {a.outcome for a in observation.actions} == {"completed"}, observation.actions
