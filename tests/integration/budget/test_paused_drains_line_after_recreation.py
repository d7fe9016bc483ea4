"""Drains paused in progress (their slot lost: cordoned, partly evicted, waiting in line with precedence) after the
budget ConfigMap was created again. The line went with it; each paused drain joins the new one at its next poll.
Among themselves they are served first come: the one paused first goes first. Each poll's renewal says since when
the drain waits (its ``drain_paused_at``), as a first ask says its ``slot_waiting_since``; without it they
joined as of their polls after the re-creation, the one paused last first if it polled first. Driven through the
Evict step, on the sandbox API server with the product's adapters."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from kubernetes import client

from nodecycle.domain.budget import DisruptionBudget, SlotRequest
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import Step
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.recreation import evict_step, lifecycle_of, six_nodes, slot_of
from tests.integration.budget.test_configmap_recreated import cordon, recreate_the_configmap


def poll(
    api: client.CoreV1Api, budget: DisruptionBudget, slot: SlotRequest, paused_at: datetime, now: datetime
) -> Outcome:
    """A poll of node ``slot.node``'s drain, paused for its lost slot since ``paused_at``."""
    record = lifecycle_of(slot, Step.EVICT, seq=4).model_copy(update={"drain_paused_at": paused_at})
    return evict_step(api, budget, slot)(record, now)


def test_drains_paused_in_progress_rejoin_the_line_in_the_order_they_paused(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given a budget of one slot held by node 0's drain, and the drains of nodes 1 and 2 paused in progress
    # (cordoned), node 1 paused ten minutes ago, node 2 one minute ago
    clock, records, blue = six_nodes(server, core, total="1")
    for i in (0, 1, 2):
        cordon(core, slot_of(i))
    first, last = clock.now() - timedelta(minutes=10), clock.now() - timedelta(minutes=1)
    # (their records at their eviction, paused: a poll of a lifecycle begun before the ConfigMap that joins its line
    # reads its record once, as a late poll of a drain over would join it too)
    for i, paused_at in ((1, first), (2, last)):
        records.create(
            lifecycle_of(slot_of(i), Step.EVICT, seq=4).model_copy(update={"drain_paused_at": paused_at})
        )

    # When the ConfigMap is created again (all three seeded from their nodes), node 2 polls before node 1, both
    # staying paused, and node 0's drain keeps its slot at its next poll
    recreate_the_configmap(server)
    clock.advance(5)
    polls = [poll(core, blue, slot_of(2), last, clock.now())]
    clock.advance(1)
    polls.append(poll(core, blue, slot_of(1), first, clock.now()))
    assert [(p.then, p.again, p.changes.get("drain_paused_at")) for p in polls] == [
        (None, True, last),
        (None, True, first),
    ]
    clock.advance(1)
    assert blue.renew(replace(slot_of(0), in_progress=True)).granted

    # Then once node 0's drain gives its slot back, it goes to node 1, paused first
    clock.advance(10)
    woken = blue.release(slot_of(0).node, slot_of(0).record_id, slot_of(0).token)
    assert woken == [slot_of(1).record_id]
