"""The product's drain time starts when its cordon step starts, before the step's requests (the node's read, the
budget document's read and renewal, the PATCH); the judges see the cordon when its PATCH lands. A slow API server
(``kube-slow``) puts its delay between the two: seed 66 scenario 5 (a scale-in, ``--forge --lag``) had a cordon
land 0.65 s after its step began, the force policy's deletes came at the product's timeout, 0.37 s before the
judge's, and their breach of the pods' budget was called a pdb violation. A request of that step served late
begins the drain for the judges at its arrival: the node's read or PATCH after the grant, or the budget
ConfigMap's between the grant and the cordon."""

from __future__ import annotations

from nodecycle_sandbox.chaos.invariants import DRAIN_TIMEOUT, _forced_from
from nodecycle_sandbox.chaos.world import BUDGET
from nodecycle_sandbox.faults import Firing
from tests.campaign.test_invariants import NODE, T0, _budget_holding, _node, _observation


def test_a_cordon_step_a_slow_api_server_delayed_begins_the_drain_at_its_slowed_request() -> None:
    # Given a node granted its slot at 3 s and cordoned at 6 s
    history = [_budget_holding(T0 + 3, NODE), _node(T0 + 6, owner="chaos-a", cordoned=True)]

    def forced_from(*firings: Firing) -> float:
        return _forced_from(_observation(history, firings=list(firings)))[NODE]

    slow = "kube-slow"
    # Then a request of its cordon step served late begins the drain when it arrived
    assert forced_from(Firing(5.2, "f1", slow, f"PATCH nodes {NODE}")) == T0 + 5.2 + DRAIN_TIMEOUT
    assert forced_from(Firing(5.0, "f1", slow, f"GET nodes {NODE}")) == T0 + 5.0 + DRAIN_TIMEOUT
    assert forced_from(Firing(4.5, "f1", slow, f"GET configmaps {BUDGET[1]}")) == T0 + 4.5 + DRAIN_TIMEOUT
    # but not one before the grant (the slot's ask), one of another node, or a ConfigMap's after the cordon
    assert forced_from(Firing(2.0, "f1", slow, f"GET configmaps {BUDGET[1]}")) == T0 + 6 + DRAIN_TIMEOUT
    assert forced_from(Firing(5.0, "f1", slow, "PATCH nodes other")) == T0 + 6 + DRAIN_TIMEOUT
    assert forced_from(Firing(7.0, "f1", slow, f"PUT configmaps {BUDGET[1]}")) == T0 + 6 + DRAIN_TIMEOUT
    assert forced_from(Firing(4.0, "f1", slow, "GET configmaps other")) == T0 + 6 + DRAIN_TIMEOUT
