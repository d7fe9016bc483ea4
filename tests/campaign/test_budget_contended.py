"""The scenario's PodDisruptionBudget contended (chaos/outages.py's ``kube-budget-contended``): its status written by
others at every try of the eviction handler's, as under many evictions at once, so that each eviction it would allow
is answered, about 10 s late, the last conflict of its status write: a 409 on the poddisruptionbudgets.policy object
(kube-apiserver, pkg/registry/core/pod/storage/eviction.go, through retry.RetryOnConflict). The judges hold under
it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


def test_a_contended_budget_holds_its_pods_evictions_up_and_breaks_no_invariant(world: World) -> None:
    # Given a terminate whose Deployment's PodDisruptionBudget is contended from the start for 25 s, longer than the
    # stacks' drain timeout (20 s)
    scenario = one_terminate(
        Fault("f1", "kube-budget-contended", "poddisruptionbudgets", start=0.0, stop=25.0, limit=1),
        node_removal=1.0,
        pod_gc_quarantine=1.0,
    )

    # When it runs to quiescence
    observation = world.run(scenario)

    # Then the contention was set, and lifted, and no invariant was violated: the drain met its timeout policy, or
    # evicted its pods once the budget was no longer contended
    assert [f.kind for f in observation.firings] == ["kube-budget-contended"], observation.firings
    assert observation.quiescent, observation.left_over
    assert invariants.check(observation) == []
    assert {a.outcome for a in observation.actions} == {"completed"}, observation.actions
    # and no pod under the budget was evicted while it was contended (from its setting to its lift), while the
    # terminated node's were evicted once it was lifted (or deleted by the drain's timeout policy)
    (fired,) = observation.firings
    web = [e for e in observation.history if e.kind == "Pod" and _labels(e.object).get("app") == "web"]
    evictions = [e.time - observation.acting_at for e in web if e.resource == "pods/eviction"]
    assert not [at for at in evictions if fired.at < at < 25.0], (fired.at, evictions)
    gone = {i.node_name for i in observation.instances if i.terminated_at is not None}
    left = [e for e in web if (e.object.get("spec") or {}).get("nodeName") in gone]
    assert left, "the test needs a web pod on the terminated node"
    assert any(
        e.resource == "pods/eviction" or (e.verb, e.resource, e.source) == ("delete", "pods", "api")
        for e in left
    ), [(e.verb, e.resource, e.source, round(e.time - observation.acting_at, 1)) for e in left]


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})
