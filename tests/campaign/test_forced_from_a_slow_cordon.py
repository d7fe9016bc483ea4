"""A cordon step's requests a slow API server (``kube-slow``) answered late do not begin its drain for the judges:
the product dates a drain whose cordon lands from the PATCH's answer, not from the step's start before its requests
(the node's read, the budget document's read and renewal, the PATCH), and the pods are promised the whole drain
timeout after the cordon. Seed 66 scenario 5 (a 0.65 s slow step) and seed 219 scenario 4 (150 ms of a loaded
machine, no fault) had the force policy's deletes 0.37 s and 20 ms before a drain timeout after the cordon, when the
product still dated from the step's start; the judges then began such a drain at its slowed requests, an excuse the
product no longer needs (tests/integration/kube/test_kube_drain_cordon_dated.py)."""

from __future__ import annotations

from nodecycle_sandbox.chaos.invariants import DRAIN_TIMEOUT, _forced_from
from nodecycle_sandbox.chaos.world import BUDGET
from nodecycle_sandbox.faults import Firing
from tests.campaign.test_invariants import NODE, T0, _budget_holding, _node, _observation


def test_a_cordon_step_a_slow_api_server_delayed_begins_the_drain_when_its_cordon_lands() -> None:
    # Given a node granted its slot at 3 s and cordoned at 6 s
    history = [_budget_holding(T0 + 3, NODE), _node(T0 + 6, owner="chaos-a", cordoned=True)]

    def forced_from(*firings: Firing) -> float:
        return _forced_from(_observation(history, firings=list(firings)))[NODE]

    slow = "kube-slow"
    # Then a request of its cordon step served late leaves the drain's beginning at the cordon
    for slowed in (
        Firing(5.2, "f1", slow, f"PATCH nodes {NODE}"),
        Firing(5.0, "f1", slow, f"GET nodes {NODE}"),
        Firing(4.5, "f1", slow, f"GET configmaps {BUDGET[1]}"),
    ):
        assert forced_from(slowed) == T0 + 6 + DRAIN_TIMEOUT, slowed
    # while a first try that failed still begins it (the product's time runs since that try)
    failed = Firing(5.0, "f1", "kube-error", f"PATCH nodes {NODE}")
    assert forced_from(failed) == T0 + 5.0 + DRAIN_TIMEOUT
