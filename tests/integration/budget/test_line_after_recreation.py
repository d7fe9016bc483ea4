"""The waiters' line after the budget ConfigMap was created again.

The line is in the document only: deleted and created again, the ConfigMap forgets it, and each waiter joins again
at its next ask (the nodes do not show waiters, so the seed cannot restore them). First come, first served: a
waiter's place is its waiting since (the replay orders a class by it), and the lifecycle keeps when it began
waiting in its record (``slot_waiting_since``). A waiter whose place went with the ConfigMap joins the new line
with it, not as a newcomer behind the nodes that asked first after the re-creation. Driven through the AcquireSlot
step, on the sandbox API server with the product's adapters."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from kubernetes import client

from nodecycle.domain.budget import DisruptionBudget, SlotRequest
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import add_nodes
from tests.integration.budget.recreation import acquire_step, record_of
from tests.integration.budget.test_configmap_recreated import budget_of, recreate_the_configmap, request
from tests.support.fakes import InMemoryRecords
from tests.unit.budget.fakes import START, FakeClock


def waiting(slot: SlotRequest, began: datetime, since: datetime | None) -> LifecycleRecord:
    """Node ``slot.node``'s terminate lifecycle at its slot's ask, begun at ``began``, waiting in line ``since``."""
    return record_of(slot, Step.ACQUIRE_SLOT, received_at=began).model_copy(
        update={"slot_waiting_since": since}
    )


def ask(api: client.CoreV1Api, budget: DisruptionBudget, record: LifecycleRecord, now: datetime) -> bool:
    """Run ``record``'s ask; whether it goes on to its cordon."""
    records = InMemoryRecords()
    records.create(record)
    outcome = acquire_step(api, budget, records)(record, now)
    return outcome.then is None and not outcome.again


def test_a_waiter_whose_place_went_with_the_configmap_goes_before_the_nodes_that_asked_after_it(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given a budget of one slot, node 1's lifecycle waiting in line for ten minutes, then the ConfigMap created
    # again, node 0 taking the slot in it, and node 2 asking for the first time before node 1 asks again
    add_nodes(server, 6)
    clock = FakeClock()
    blue = budget_of(core, clock, "blue", "1", "1")  # (stack blue's budget of one slot)
    old = waiting(request(1), began=START - timedelta(minutes=11), since=START - timedelta(minutes=10))
    new = waiting(request(2), began=START - timedelta(seconds=30), since=None)
    recreate_the_configmap(server)
    holder = replace(request(0), since=START)
    assert blue.acquire(holder).granted
    clock.advance(1)
    assert not ask(core, blue, new, clock.now())
    clock.advance(10)
    assert not ask(core, blue, old, clock.now())

    # When node 0's drain gives its slot back
    clock.advance(60)
    woken = blue.release(holder.node, holder.record_id, holder.token)

    # Then the slot goes to node 1, first come: waiting ten minutes, not behind node 2, which came after it
    assert woken == [request(1).record_id]
    assert [h.node for h in blue.snapshot().holders] == [request(1).node]
