"""A budget document put back without the stack's note (``budget.written``, see adapters/kube/budget.py): a backup
taken before this version wrote the note, restored into the ConfigMap created again; or an old document replaced
into the ConfigMap as it was (``kubectl replace`` of a saved manifest). Without a note a document is taken as written
to its ConfigMap (every document was, before the note), so neither was seeded: the drains that began after the
document was saved went on evicting, counted nowhere, and new grants went past the limits (invariant 1). A document
without the note that no writer stamped when it was set (its newest stamp older, by more than any clock may run behind
the API server's, than its ConfigMap's creation or than the time its managedFields entry tells it was set) was not
written there by a stack: it is seeded. So is a snapshot of the whole object, note and all, applied again to the same
object, which the note vouched for: the API server tells it was set by another manager than the stack's. On the
sandbox API server, through the product's adapters."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from kubernetes import client

from nodecycle.adapters.kube.budget import WRITTEN_KEY
from nodecycle.domain.budget import SlotReason
from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.kube import api as sandbox_api
from tests.integration.budget.conftest import NAMESPACE, add_nodes, admin_api, core_api, node_name
from tests.integration.budget.test_budget_restored_document import NAME, backup, restore
from tests.integration.budget.test_configmap_recreated import (
    budget_of,
    cordon,
    recreate_the_configmap,
    request,
)
from tests.unit.budget.fakes import FakeClock


def created_hours_ago(server: KubeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The budget ConfigMap as an old one is: created (as shipped, empty) two hours ago, by the API server's clock."""
    monkeypatch.setattr(sandbox_api, "time", SimpleNamespace(time=lambda: time.time() - 2 * 3600))
    recreate_the_configmap(server)
    monkeypatch.undo()


def without_the_note(saved: client.V1ConfigMap) -> client.V1ConfigMap:
    """``saved`` as a backup taken before this version kept it: its document, no note."""
    saved.data = {key: value for key, value in (saved.data or {}).items() if key != WRITTEN_KEY}
    return saved


def test_drains_in_progress_are_counted_when_the_configmap_is_restored_from_a_backup_older_than_the_note(
    server: KubeServer,
) -> None:
    # Given a budget of 2, backed up an hour ago (before this version) while nodes 3 and 4 held its slots (drains
    # over long since), and two drains in progress now on nodes 0 and 1
    add_nodes(server, 6)
    api = core_api(server)
    clock = FakeClock(datetime.now(UTC) - timedelta(hours=1))
    blue = budget_of(api, clock, "blue")
    assert blue.acquire(request(3)).granted
    assert blue.acquire(request(4)).granted
    saved = without_the_note(backup(server))
    clock.advance(timedelta(hours=1).total_seconds())
    for i in (0, 1):
        assert blue.acquire(request(i)).granted
        cordon(api, request(i))

    # When the ConfigMap is restored from that backup
    restore(server, saved)
    clock.advance(5)

    # Then a third node still waits: the drains in progress are counted from their nodes
    third = blue.acquire(request(2))
    assert (third.granted, third.reason, third.holders) == (False, SlotReason.NO_ROOM, 2)
    assert {h.node for h in blue.snapshot().holders} == {node_name(0), node_name(1)}
    api.api_client.close()


def test_a_document_without_the_note_written_since_its_configmap_was_created_is_taken_as_written_there(
    server: KubeServer,
) -> None:
    # Given a budget of 2 whose ConfigMap was last written before this version (no note), a minute ago, while
    # node 3 held a slot
    add_nodes(server, 6)
    api = core_api(server)
    clock = FakeClock(datetime.now(UTC))
    blue = budget_of(api, clock, "blue")
    assert blue.acquire(request(3)).granted
    saved = without_the_note(backup(server))
    admin_api(server).replace_namespaced_config_map(NAME, NAMESPACE, saved)
    clock.advance(60)

    # When a node asks
    server.reset_counters()
    asked = blue.acquire(request(0))

    # Then the document is the budget's: no node listed to seed it
    assert (asked.granted, asked.holders) == (True, 2)
    assert server.counters().get(("list", "nodes"), 0) == 0
    api.api_client.close()


def test_a_snapshot_of_the_whole_configmap_applied_again_to_it_is_seeded(
    server: KubeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a budget of 2 in a ConfigMap created two hours ago, saved whole an hour ago (its document and its note;
    # nodes 3 and 4 held its slots then, drains over long since), and two drains in progress now on nodes 0 and 1
    add_nodes(server, 6)
    created_hours_ago(server, monkeypatch)
    api = core_api(server)
    clock = FakeClock(datetime.now(UTC) - timedelta(hours=1))
    blue = budget_of(api, clock, "blue")
    assert blue.acquire(request(3)).granted
    assert blue.acquire(request(4)).granted
    saved = dict(backup(server).data or {})
    assert WRITTEN_KEY in saved
    clock.advance(timedelta(hours=1).total_seconds())
    for i in (0, 1):
        assert blue.acquire(request(i)).granted
        cordon(api, request(i))

    # When a GitOps tool applies that snapshot again to the same ConfigMap: the note matches its document, uid and all
    admin_api(server).patch_namespaced_config_map(NAME, NAMESPACE, {"data": saved})
    clock.advance(5)

    # Then the drains in progress are counted from their nodes: a third node waits
    third = blue.acquire(request(2))
    assert (third.granted, third.reason, third.holders) == (False, SlotReason.NO_ROOM, 2)
    assert {h.node for h in blue.snapshot().holders} == {node_name(0), node_name(1)}
    api.api_client.close()


def test_a_document_replaced_without_the_note_in_the_configmap_as_it_was_is_seeded(
    server: KubeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a budget of 2 in a ConfigMap created two hours ago, whose document was saved an hour ago (nodes 3 and 4
    # held its slots), and two drains in progress now on nodes 0 and 1
    add_nodes(server, 6)
    created_hours_ago(server, monkeypatch)
    api = core_api(server)
    clock = FakeClock(datetime.now(UTC) - timedelta(hours=1))
    blue = budget_of(api, clock, "blue")
    assert blue.acquire(request(3)).granted
    assert blue.acquire(request(4)).granted
    document = str((backup(server).data or {})["budget.json"])
    clock.advance(timedelta(hours=1).total_seconds())
    for i in (0, 1):
        assert blue.acquire(request(i)).granted
        cordon(api, request(i))

    # When someone replaces the ConfigMap's data with that document alone (`kubectl replace` of a saved manifest)
    current = backup(server)
    current.data = {"budget.json": document}
    admin_api(server).replace_namespaced_config_map(NAME, NAMESPACE, current)
    clock.advance(5)

    # Then the drains in progress are counted from their nodes: a third node waits
    third = blue.acquire(request(2))
    assert (third.granted, third.reason, third.holders) == (False, SlotReason.NO_ROOM, 2)
    api.api_client.close()
