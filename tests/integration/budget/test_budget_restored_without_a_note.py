"""The budget ConfigMap restored from a backup taken before this version wrote its note (``budget.written``, see
adapters/kube/budget.py): created again with an old ``budget.json`` and no note. Without a note a document is taken
as written to its ConfigMap (every document was, before the note), so such a restore was not seeded: the drains that
began after the backup went on evicting, counted nowhere, and new grants went past the limits (invariant 1). A
document without the note that nothing wrote since its ConfigMap was created (its newest stamp older than the
creation, by more than any clock may run behind the API server's) was not written to it: restored, and seeded. On
the sandbox API server, through the product's adapters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kubernetes import client

from nodecycle.adapters.kube.budget import WRITTEN_KEY
from nodecycle.domain.budget import SlotReason
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE, add_nodes, admin_api, core_api, node_name
from tests.integration.budget.test_budget_restored_document import NAME, backup, restore
from tests.integration.budget.test_configmap_recreated import budget_of, cordon, request
from tests.unit.budget.fakes import FakeClock


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
