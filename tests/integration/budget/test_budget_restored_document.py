"""The budget ConfigMap restored from a backup (Velero, a GitOps tool holding a snapshot of the live object): created
again, but with an old ``budget.json`` in it, its holders' drains over long since, its waiters gone, perhaps of an
older format. On the sandbox API server, through the product's adapters.

A ConfigMap created again empty is seeded with the drains in progress its nodes show (see
test_configmap_recreated.py). A restored one was not: it held a document, so the budget took it as its own, pruned
its expired entries and counted nothing else, while the drains that began after the backup went on cordoning and
evicting, counted nowhere: new grants went past the limits (invariant 1). The budget now believes of a document it
did not write in this ConfigMap (the store tells: see ``BudgetDocument.unvouched``) only what cannot lose a
drain in progress: its live entries, as any document's (expired ones go, as ever: no holder is kept past its TTL,
invariant 10), and the drains in progress the nodes show, seeded as for a document never written."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from kubernetes import client

from nodecycle.domain.budget import SlotReason
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE, add_nodes, admin_api, core_api, node_name
from tests.integration.budget.test_configmap_recreated import TTL, budget_of, cordon, request
from tests.unit.budget.fakes import START, FakeClock

NAME = "nodecycle-budget"


def backup(server: KubeServer) -> client.V1ConfigMap:
    """The budget ConfigMap as a backup keeps it."""
    return admin_api(server).read_namespaced_config_map(NAME, NAMESPACE)


def restore(server: KubeServer, saved: client.V1ConfigMap, *, format_version: int | None = None) -> None:
    """The ConfigMap deleted and created again from ``saved`` as Velero restores an object: its data, labels and
    annotations; a new uid, resourceVersion and creation time. ``format_version``: the document as an older
    nodecycle wrote it (no lifecycle tokens before format 3)."""
    admin = admin_api(server)
    admin.delete_namespaced_config_map(NAME, NAMESPACE)
    data = dict(saved.data or {})
    if format_version is not None:
        document = json.loads(data["budget.json"])
        document["formatVersion"] = format_version
        for key in ("holders", "waiters", "released"):
            for entry in document[key]:
                entry.pop("token", None)
        data["budget.json"] = json.dumps(document)
    assert saved.metadata is not None
    metadata = client.V1ObjectMeta(
        name=NAME, namespace=NAMESPACE, labels=saved.metadata.labels, annotations=saved.metadata.annotations
    )
    admin.create_namespaced_config_map(NAMESPACE, client.V1ConfigMap(metadata=metadata, data=data))


@pytest.mark.parametrize("format_version", [None, 2])
def test_drains_in_progress_are_counted_when_the_configmap_is_restored_from_an_old_backup(
    server: KubeServer, format_version: int | None
) -> None:
    # Given a budget of 2, backed up an hour ago while nodes 3 and 4 held its slots and node 5 waited (drains over
    # long since), and two drains in progress now on nodes 0 and 1 (slot held, node claimed)
    add_nodes(server, 6)
    api = core_api(server)
    clock = FakeClock(START - timedelta(hours=1))
    blue = budget_of(api, clock, "blue")
    assert blue.acquire(request(3)).granted
    assert blue.acquire(request(4)).granted
    assert blue.acquire(request(5)).reason is SlotReason.NO_ROOM
    saved = backup(server)
    clock.advance(timedelta(hours=1).total_seconds())
    for i in (0, 1):
        assert blue.acquire(request(i)).granted
        cordon(api, request(i))

    # When the ConfigMap is restored from that backup
    restore(server, saved, format_version=format_version)
    clock.advance(5)

    # Then a third node still waits: the drains in progress are counted from their nodes, and nothing of the
    # backup's holds a slot
    third = blue.acquire(request(2))
    assert (third.granted, third.reason, third.holders) == (False, SlotReason.NO_ROOM, 2)
    held = {h.node: h.record_id for h in blue.snapshot().holders}
    assert held == {node_name(i): request(i).record_id for i in (0, 1)}
    # and the drains in progress keep their slots at their renewals
    for i in (0, 1):
        assert blue.renew(request(i)).reason is SlotReason.HELD
    api.api_client.close()


def test_a_recent_backups_holders_are_counted_until_their_ttl_and_another_owners_is_never_taken(
    server: KubeServer,
) -> None:
    # Given a budget of 2 per stack, backed up a minute ago while blue's node 3 and green's node 4 held slots
    # (their drains over since, their nodes released), and blue's drain in progress now on node 0
    add_nodes(server, 6)
    api = core_api(server)
    clock = FakeClock(START - timedelta(minutes=1))
    blue = budget_of(api, clock, "blue")
    green = budget_of(api, clock, "green")
    assert blue.acquire(request(3)).granted
    assert green.acquire(request(4, "green")).granted
    saved = backup(server)
    assert blue.release(node_name(3), request(3).record_id, request(3).token) == []
    assert green.release(node_name(4), request(4, "green").record_id, request(4, "green").token) == []
    clock.advance(60)
    assert blue.acquire(request(0)).granted
    cordon(api, request(0))

    # When the ConfigMap is restored from that backup
    restore(server, saved)
    clock.advance(5)

    # Then the backup's holders count as the live holders they look like (the budget cannot tell them over), the
    # drain in progress beside them: blue's next node waits, and blue never takes green's node
    assert blue.acquire(request(1)).reason is SlotReason.NO_ROOM
    assert blue.acquire(request(4)).reason is SlotReason.HELD_BY_OTHER_OWNER
    assert {h.node for h in blue.snapshot().holders} == {node_name(i) for i in (0, 3, 4)}
    # and no longer than their TTL, from their last renewal before the backup: then blue's next node goes
    clock.advance(TTL.total_seconds() - 60)
    assert blue.renew(request(0)).reason is SlotReason.HELD
    assert blue.acquire(request(1)).granted
    assert {h.node for h in blue.snapshot().holders} == {node_name(0), node_name(1)}
    api.api_client.close()


def test_an_old_document_applied_again_to_the_configmap_is_seeded_once(server: KubeServer) -> None:
    # Given a budget of 2 whose document was saved an hour ago (nodes 3 and 4 held its slots), and two drains in
    # progress now on nodes 0 and 1
    add_nodes(server, 6)
    api = core_api(server)
    clock = FakeClock(START - timedelta(hours=1))
    blue = budget_of(api, clock, "blue")
    assert blue.acquire(request(3)).granted
    assert blue.acquire(request(4)).granted
    saved = str((backup(server).data or {})["budget.json"])
    clock.advance(timedelta(hours=1).total_seconds())
    for i in (0, 1):
        assert blue.acquire(request(i)).granted
        cordon(api, request(i))

    # When a GitOps tool applies that document again to the same ConfigMap (or someone pastes it in by hand): the
    # ConfigMap's other keys are left as they are
    admin_api(server).patch_namespaced_config_map(NAME, NAMESPACE, {"data": {"budget.json": saved}})
    clock.advance(5)

    # Then the drains in progress are counted from their nodes: a third node waits
    server.reset_counters()
    third = blue.acquire(request(2))
    assert (third.granted, third.reason, third.holders) == (False, SlotReason.NO_ROOM, 2)
    assert server.counters()[("list", "nodes")] == 1
    # and once written, the document is the budget's own again: its next writes list no nodes
    clock.advance(TTL.total_seconds() / 2)
    assert blue.renew(request(0)).reason is SlotReason.HELD
    assert blue.acquire(request(2)).reason is SlotReason.NO_ROOM
    assert server.counters()[("list", "nodes")] == 1
    api.api_client.close()
