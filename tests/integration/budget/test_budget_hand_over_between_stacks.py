"""A slot one stack frees that another stack's waiter is owed, on the API server through the product's ConfigMap store:
the stack that frees it cannot reach the waiter's queue, so the waiter's own stack passes it the slot and wakes it at
its next write of the budget, even one that the API server refuses with a conflict first (another writer's update
between the read and the replace), rather than leave it idle until the waiter's own retry (up to 4 x
BudgetRetrySeconds)."""

from __future__ import annotations

from kubernetes import client

from nodecycle.domain.budget import SlotReason
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import add_nodes
from tests.integration.budget.test_configmap_recreated import budget_of, request
from tests.unit.budget.fakes import FakeClock


def test_a_slot_another_stack_frees_is_passed_to_the_waiter_by_its_own_stacks_next_write(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given a budget of 1 that green holds for node 0, and blue's node 1 first in line
    add_nodes(server, 6)
    clock = FakeClock()
    green, blue = budget_of(core, clock, "green", "1", "1"), budget_of(core, clock, "blue", "1", "1")
    assert green.acquire(request(0, owner="green")).granted
    assert blue.acquire(request(1)).reason is SlotReason.NO_ROOM

    # When green gives node 0 back (it wakes nobody: node 1 is blue's), and blue's node 2 joins the line, its write
    # refused once by a conflict
    clock.advance(5)
    assert green.release(request(0, owner="green").node, request(0, owner="green").record_id) == []
    clock.advance(1)
    server.faults.arm([Fault("conflict", "kube-conflict", target="PUT configmaps", limit=1)], seed=1)
    decision = blue.acquire(request(2))
    assert server.faults.counts() == {"kube-conflict": 1}

    # Then that write passed the slot on to node 1 and wakes it: its lifecycle finds its slot held
    assert (decision.granted, decision.wake) == (False, (request(1).record_id,))
    assert blue.acquire(request(1)).reason is SlotReason.HELD
    # and node 2 still waits
    assert blue.acquire(request(2)).reason is SlotReason.NO_ROOM
