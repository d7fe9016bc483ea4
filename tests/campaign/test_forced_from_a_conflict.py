"""The force policy's moment, as the judges reckon it, follows the product's drain time: that runs since the drain's
first try, and a cordon whose PATCH a 409 storm answered (``kube-conflict``) was one. Reckoned from the cordon that
landed, it came later than the product's (seed 64 scenario 1: a scale-in whose cordon met 409s for 2 s, its forced
deletes at the drain timeout judged early, and their breach of the pods' budget called a pdb violation)."""

from __future__ import annotations

from nodecycle_sandbox.chaos.invariants import DRAIN_TIMEOUT, _forced_from
from nodecycle_sandbox.faults import Firing
from tests.campaign.test_invariants import NODE, T0, _node, _observation, _terminate


def test_a_cordon_a_conflict_answered_begins_the_drain_as_other_refused_tries_do() -> None:
    # Given a terminate action from 1 s, its node cordoned at 5 s after a PATCH a 409 storm answered at 3 s
    history = [_node(T0 + 5, cordoned=True)]
    for kind in ("kube-conflict", "kube-webhook-deny"):
        firing = Firing(3.0, "f1", kind, f"PATCH nodes {NODE}")
        observation = _observation(history, actions=[_terminate(T0 + 60)], firings=[firing])

        # Then the force may act a drain timeout after that first try, not after the cordon that landed
        assert _forced_from(observation)[NODE] == T0 + 3 + DRAIN_TIMEOUT, kind
    # and with no refused try, from the cordon
    assert _forced_from(_observation(history, actions=[_terminate(T0 + 60)]))[NODE] == T0 + 5 + DRAIN_TIMEOUT
