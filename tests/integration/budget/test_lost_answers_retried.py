"""Asks whose write the API server applied and whose answer was lost, the read back failing too: the outcome stays
unknown (``WriteOutcomeUnknown``), and the step is retried. The retry must find what the lost write did: its node's
slot held once (not a second slot), or its place in line kept (not dropped, nor joined again behind the nodes that
asked since). On the sandbox API server, through the product's client and adapters."""

from __future__ import annotations

import pytest
from kubernetes import client

from nodecycle.domain.budget import DisruptionBudget, SlotReason
from nodecycle.domain.budget.errors import WriteOutcomeUnknown
from nodecycle.domain.errors import TransientError
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import add_nodes, node_name
from tests.integration.budget.test_lost_answers import api, budget_of, request
from tests.unit.budget.fakes import FakeClock

__all__ = ["api"]  # (the fixture)


def lost_unknown(server: KubeServer, blue: DisruptionBudget, monkeypatch: pytest.MonkeyPatch, i: int) -> None:
    """Node ``i``'s ask, its write applied and its answer lost, the read back that follows refused (a 500): unknown."""
    server.faults.arm([Fault("lost", "kube-lost-response", target="PUT configmaps", limit=1)], seed=1)

    def refused() -> None:
        raise TransientError("reading ConfigMap nodecycle/nodecycle-budget: HTTP 500")

    with monkeypatch.context() as patched:
        patched.setattr(blue._store, "read", refused)  # (only the read back reads outside an update)
        with pytest.raises(WriteOutcomeUnknown):
            blue.acquire(request(i))
    assert [f.kind for f in server.faults.firings()] == ["kube-lost-response"]
    server.faults.disarm()


def test_a_grant_whose_outcome_is_unknown_is_held_once_at_the_retry(
    server: KubeServer, api: client.CoreV1Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a budget of 2, node 0 holding a slot
    add_nodes(server, 6)
    clock = FakeClock()
    blue = budget_of(api, clock)
    assert blue.acquire(request(0)).granted

    # When node 1's grant is written and its outcome is unknown, and its step asks again
    lost_unknown(server, blue, monkeypatch, 1)
    clock.advance(5)
    again = blue.acquire(request(1))

    # Then node 1 holds its one slot, and a third node waits
    assert (again.granted, again.reason) == (True, SlotReason.HELD)
    assert [h.node for h in blue.snapshot().holders] == [node_name(0), node_name(1)]
    assert blue.acquire(request(2)).reason is SlotReason.NO_ROOM


def test_a_place_in_line_whose_outcome_is_unknown_is_kept_at_the_retry(
    server: KubeServer, api: client.CoreV1Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a budget of 2 held by nodes 0 and 1
    add_nodes(server, 6)
    clock = FakeClock()
    blue = budget_of(api, clock)
    for i in (0, 1):
        assert blue.acquire(request(i)).granted

    # When node 2 joins the line and its outcome is unknown, node 3 asks, then node 2's step asks again
    lost_unknown(server, blue, monkeypatch, 2)
    clock.advance(1)
    assert blue.acquire(request(3)).reason is SlotReason.NO_ROOM
    clock.advance(5)
    again = blue.acquire(request(2))

    # Then node 2 keeps its place, first in line, once; and the next slot freed goes to it
    assert (again.reason, again.position) == (SlotReason.NO_ROOM, 1)
    assert [w.node for w in blue.snapshot().waiters] == [node_name(2), node_name(3)]
    assert blue.release(node_name(0), "rec-0") == ["rec-2"]
