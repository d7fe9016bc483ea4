"""A late delivery of a drain's CORDON step (a duplicate that read the record at its cordon, then ran after the
whole drain: its evictions, its completion, its cleanup, which cleared the node's annotations and gave the slot
back). Its claim would annotate and cordon the node again for a lifecycle that is over: nothing would ever lift
it but the sweeper (the node of an instance not terminating any more stays cordoned, its pods kept off it), and a
slot taken again would idle. It must read what the lifecycle's own record says first. The cordon confirms its
slot before it touches the node: a lifecycle that gave it back is refused by the mark of its release
(``released``), or, the ConfigMap created again since and the mark gone with it, by its record, finished, as the
budget reads it (see test_late_polls_after_recreation.py). Its commit then loses. Driven through the Cordon step,
on the sandbox API server with the product's adapters."""

from __future__ import annotations

import pytest
from kubernetes import client

from nodecycle.domain.budget import DisruptionBudget, SlotRequest
from nodecycle.domain.drain.acquire import RecordedLifecycles
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import Step
from nodecycle.domain.ports.cluster import IN_PROGRESS_ANNOTATION, OWNER_ANNOTATION
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import node_name
from tests.integration.budget.recreation import (
    at_its_cordon,
    claimed_and_released,
    cordon_step,
    drained_and_released,
    lifecycle_of,
    six_nodes,
    slot_of,
)
from tests.integration.budget.test_configmap_recreated import recreate_the_configmap
from tests.support.fakes import InMemoryRecords
from tests.unit.budget.fakes import FakeClock


def late_cordon(
    api: client.CoreV1Api,
    budget: DisruptionBudget,
    records: InMemoryRecords,
    slot: SlotRequest,
    clock: FakeClock,
) -> Outcome:
    """A late delivery of node ``slot.node``'s cordon, with the record as it read it then (at its cordon, seq 2),
    the step wired as the drain function wires it."""
    return cordon_step(api, budget, RecordedLifecycles(records), clock=clock)(
        at_its_cordon(slot), clock.now()
    )


def left_alone(server: KubeServer, i: int) -> bool:
    """Node ``i`` carries no claim of nodecycle's."""
    found = server.get_object("nodes", node_name(i))
    assert found is not None
    annotations = found["metadata"].get("annotations") or {}
    return IN_PROGRESS_ANNOTATION not in annotations and OWNER_ANNOTATION not in annotations


@pytest.mark.parametrize("recreated", [False, True], ids=["document-kept", "configmap-recreated"])
def test_a_late_cordon_after_the_drains_cleanup_leaves_the_node_and_the_slot_alone(
    server: KubeServer, core: client.CoreV1Api, recreated: bool
) -> None:
    # Given node 0's drain over: cordoned, drained, its annotations cleared and its slot given back by its
    # cleanup, its record finished (and the ConfigMap perhaps deleted and created again since)
    clock, records, blue = six_nodes(server, core, total="1")
    slot = slot_of(0)
    drained_and_released(core, slot, clock)
    records.create(lifecycle_of(slot, Step.DONE, seq=6))
    if recreated:
        recreate_the_configmap(server)
    clock.advance(5)

    # When a late delivery of its cordon runs
    outcome = late_cordon(core, blue, records, slot, clock)

    # Then the node is not claimed again for the lifecycle over, no slot is held for it, and the step goes
    # nowhere (its commit loses to the record's)
    assert left_alone(server, 0)
    assert not blue.snapshot().holders
    assert outcome.then is None
    assert outcome.again


def test_a_late_cordon_while_the_cleanup_runs_leaves_the_node_alone_before_the_slot_is_given_back(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given node 0's drain at its cleanup: the node's annotations cleared, its slot not given back yet
    clock, records, blue = six_nodes(server, core, total="1")
    slot = slot_of(0)
    claimed_and_released(core, blue, slot)
    records.create(lifecycle_of(slot, Step.CLEANUP, seq=5))
    clock.advance(5)

    # When a late delivery of its cordon runs (the slot still held: the budget alone cannot tell it is late)
    outcome = late_cordon(core, blue, records, slot, clock)

    # Then its record tells: the node is left alone
    assert left_alone(server, 0)
    assert (outcome.then, outcome.again) == (None, True)
