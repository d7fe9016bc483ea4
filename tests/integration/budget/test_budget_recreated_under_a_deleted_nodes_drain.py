"""The budget ConfigMap deleted and created again while a drain evicts the pods left bound to the name of a node
object deleted under it (``kubectl delete node``, its instance running: see drain/orphans.py).

The seed of a document created again counts the drains in progress that the nodes show, by their owner and
in-progress annotations. Such a drain has no node left to show it: no annotation, no cordon. Left out of the seed,
its slot went to another node while its evictions went on, until its next renewal paused it (and the pods it had
asked to leave were stopping meanwhile): two nodes disrupted under a budget of one (invariant 1). Its lifecycle's
record tells it (at its eviction, its node named), so the seed reads this owner's open records too. On the
sandbox API server with the product's adapters."""

from __future__ import annotations

from kubernetes import client

from nodecycle.domain.model import Step
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import admin_api, node_name
from tests.integration.budget.recreation import in_progress, lifecycle_of, six_nodes, slot_of
from tests.integration.budget.test_configmap_recreated import recreate_the_configmap


def test_a_drain_whose_node_object_was_deleted_keeps_its_slot_when_the_configmap_is_recreated(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given a budget of 1, node 0's drain in progress (slot held, node claimed, record at its eviction), then its
    # node object deleted while its instance runs (its pods stay bound to the name), then the ConfigMap created
    # again empty
    clock, records, blue = six_nodes(server, core, total="1")
    draining = slot_of(0)
    in_progress(core, blue, records, draining)
    admin_api(server).delete_node(node_name(0))
    recreate_the_configmap(server)
    clock.advance(5)

    # When node 1's drain asks for a slot (the first write to the new document)
    asked = blue.acquire(slot_of(1))

    # Then it waits: node 0's drain is counted from its record, a seeded holder of its own lifecycle
    assert not asked.granted
    assert [(h.node, h.record_id, h.seeded) for h in blue.snapshot().holders] == [
        (node_name(0), draining.record_id, True)
    ]


def test_a_drain_at_its_cleanup_is_not_seeded_from_its_record(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given a budget of 1, node 0's lifecycle past its drain (its record at its cleanup), its node object deleted,
    # then the ConfigMap created again empty
    clock, records, blue = six_nodes(server, core, total="1")
    done = slot_of(0)
    in_progress(core, blue, records, done)
    stored = records.get(done.record_id)
    assert stored is not None
    assert records.commit(lifecycle_of(done, Step.CLEANUP, seq=4), expected_seq=stored.seq)
    admin_api(server).delete_node(node_name(0))
    recreate_the_configmap(server)
    clock.advance(5)

    # When node 1's drain asks for a slot, Then it is granted: nothing of node 0's is disrupting
    assert blue.acquire(slot_of(1)).granted
