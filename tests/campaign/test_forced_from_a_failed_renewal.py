"""A cordon step confirms its drain's slot in the budget ConfigMap before its PATCH, and a confirmation that fails
(a 500 or 429 the store does not retry, a dropped connection) or is refused (RBAC, a webhook) is a failing or refused
try of the cordon: the product's drain time runs since that try's step began (``cordon.Cordon._failing``,
``_refused``: "settled at the drain timeout from its first failure"), and its cordon lands a retry later. Reckoned
from the cordon that landed, the judges called the force policy's deletes early by that retry, a breach of the pods'
budget a pdb violation. A 409 is left out: the store reads and writes again itself, and only a storm past its retries
fails the step (``_stormed``)."""

from __future__ import annotations

from nodecycle_sandbox.chaos.invariants import DRAIN_TIMEOUT, _forced_from
from nodecycle_sandbox.chaos.world import BUDGET
from nodecycle_sandbox.faults import Firing
from tests.campaign.test_invariants import NODE, T0, _budget_holding, _node, _observation


def test_a_failed_confirmation_of_the_slot_at_the_cordon_begins_the_drain_as_a_failed_cordon_does() -> None:
    # Given a node granted its slot at 3 s and cordoned at 6 s
    history = [_budget_holding(T0 + 3, NODE), _node(T0 + 6, owner="chaos-a", cordoned=True)]

    def forced_from(*firings: Firing) -> float:
        return _forced_from(_observation(history, firings=list(firings)))[NODE]

    # Then a request of the budget ConfigMap a fault failed or refused between the grant and the cordon begins it
    for kind in ("kube-error", "kube-throttle", "kube-drop", "kube-forbidden", "kube-webhook-deny"):
        failed = Firing(4.0, "f1", kind, f"GET configmaps {BUDGET[1]}")
        assert forced_from(failed) == T0 + 4.0 + DRAIN_TIMEOUT, kind
    # but not a 409 (retried by the store), one before the grant (the slot's ask), after the cordon, or of another
    # ConfigMap
    for firing in (
        Firing(4.0, "f1", "kube-conflict", f"PUT configmaps {BUDGET[1]}"),
        Firing(2.0, "f1", "kube-error", f"GET configmaps {BUDGET[1]}"),
        Firing(7.0, "f1", "kube-error", f"PUT configmaps {BUDGET[1]}"),
        Firing(4.0, "f1", "kube-error", "GET configmaps other"),
    ):
        assert forced_from(firing) == T0 + 6 + DRAIN_TIMEOUT, firing
