"""A drain's cordon after the budget ConfigMap was deleted and created again between its slot's grant and its
cordon (its next step, queued).

The document created again is seeded from the nodes: drains in progress are the nodes nodecycle claimed
(cordoned, marked). A drain granted its slot in the document before, not yet cordoned when the seed lists the
nodes, is not among them: another node's ask may be granted the very slot. Its cordon then went ahead all the
same, and two nodes were disrupted (cordoned) in a budget of one until the first one's first poll (which renews
the slot before any eviction) paused it. The cordon confirms its slot is held in the current document before it
PATCHes the node: a renewal, which a holder granted moments ago passes with one read of the ConfigMap (a fresh
holder writes nothing); not held and no room, it asks again in line instead of cordoning. Driven through the
Cordon step, on the sandbox API server with the product's adapters."""

from __future__ import annotations

import pytest
from kubernetes import client

from nodecycle.domain.budget import DisruptionBudget
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import Step
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE, node_name
from tests.integration.budget.recreation import at_its_cordon, cordon_step, six_nodes, slot_of
from tests.integration.budget.test_configmap_recreated import cordon, recreate_the_configmap
from tests.support.fakes import InMemoryRecords
from tests.unit.budget.fakes import FakeClock


def cordons(
    api: client.CoreV1Api, budget: DisruptionBudget, records: InMemoryRecords, i: int, clock: FakeClock
) -> Outcome:
    """Node ``i``'s CORDON step, as the drain function runs it after its slot's grant (its drain not begun),
    its record at the step."""
    record = at_its_cordon(slot_of(i))
    records.create(record)
    return cordon_step(api, budget, clock=clock)(record, clock.now())


def unschedulable(server: KubeServer, i: int) -> bool:
    node = server.get_object("nodes", node_name(i))
    assert node is not None
    return bool(node["spec"].get("unschedulable"))


def version(server: KubeServer) -> str:
    """The budget ConfigMap's resourceVersion: it moves at each write."""
    found = server.get_object("configmaps", "nodecycle-budget", NAMESPACE)
    assert found is not None
    return str(found["metadata"]["resourceVersion"])


def test_a_drain_granted_before_the_configmap_was_recreated_does_not_cordon_beside_the_one_granted_since(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given a budget of 1, and node 0's drain granted its slot, its cordon not made yet (its next step queued)
    clock, records, blue = six_nodes(server, core, total="1")
    assert blue.acquire(slot_of(0)).granted

    # When the ConfigMap is re-created empty, node 1 asks first (its seed finds no drain in progress) and is
    # cordoned, and then node 0's cordon runs
    recreate_the_configmap(server)
    clock.advance(5)
    assert blue.acquire(slot_of(1)).granted
    cordon(core, slot_of(1))
    clock.advance(1)
    outcome = cordons(core, blue, records, 0, clock)

    # Then node 0 is not cordoned: its drain asks again, in line behind node 1's, which alone holds the slot
    assert outcome.then is Step.ACQUIRE_SLOT
    assert not unschedulable(server, 0)
    assert [h.node for h in blue.snapshot().holders] == [node_name(1)]


@pytest.mark.parametrize("recreated", [False, True], ids=["document-as-written", "configmap-recreated"])
def test_a_drain_granted_its_slot_cordons_with_it_held_or_taken_again_in_the_new_document(
    server: KubeServer, core: client.CoreV1Api, recreated: bool
) -> None:
    # Given a budget of 1 and node 0's drain granted its slot: the document as written, or the ConfigMap
    # re-created empty before its cordon
    clock, records, blue = six_nodes(server, core, total="1")
    assert blue.acquire(slot_of(0)).granted
    if recreated:
        recreate_the_configmap(server)
        clock.advance(5)
    before = version(server)
    clock.advance(1)

    # When its cordon runs, nothing else asked since
    outcome = cordons(core, blue, records, 0, clock)

    # Then it cordons, holding the slot: confirmed by a read (the ConfigMap is not written again), or taken in
    # the new document
    assert (outcome.then, outcome.again) == (None, False)
    assert unschedulable(server, 0)
    assert [h.node for h in blue.snapshot().holders] == [node_name(0)]
    if not recreated:
        assert version(server) == before
