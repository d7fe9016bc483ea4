"""A budget document put back less than MAX_CLOCK_AHEAD (10 min) after it was saved, without the stack's note
(``budget.written``): a backup taken before this version wrote the note, restored into the ConfigMap created again,
or the data replaced in the ConfigMap as it was. A document without the note was judged by its stamps alone (see
test_budget_restored_without_a_note.py): stamped within 10 min of the time it was set, it was taken as written
there, as a stack whose clock runs behind the API server's would stamp it. So a restore of a backup five minutes old
was not seeded: the drains begun since it was saved went on evicting, counted nowhere, and a third node was granted
under a limit of 2 (invariant 1). The API server tells who set the document (managedFields: the manager of the
write that set ``data.budget.json``, the product's own fieldManager for a stack's write), whatever its age. On the
sandbox API server, through the product's adapters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from nodecycle.domain.budget import SlotReason
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE, add_nodes, admin_api, core_api, node_name
from tests.integration.budget.test_budget_restored_document import NAME, backup, restore
from tests.integration.budget.test_budget_restored_without_a_note import created_hours_ago, without_the_note
from tests.integration.budget.test_configmap_recreated import budget_of, cordon, request
from tests.unit.budget.fakes import FakeClock


@pytest.mark.parametrize("how", ["restored", "replaced"])
def test_a_backup_without_the_note_put_back_five_minutes_after_it_was_taken_is_seeded(
    server: KubeServer, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    # Given a budget of 2 in a ConfigMap created two hours ago, saved (without the note) five minutes ago while nodes
    # 3 and 4 held its slots, given back since, and two drains in progress now on nodes 0 and 1
    add_nodes(server, 6)
    created_hours_ago(server, monkeypatch)
    api = core_api(server)
    clock = FakeClock(datetime.now(UTC) - timedelta(minutes=5))
    blue = budget_of(api, clock, "blue")
    for i in (3, 4):
        assert blue.acquire(request(i)).granted
    saved = without_the_note(backup(server))
    clock.advance(60)
    for i in (3, 4):
        blue.release(node_name(i), request(i).record_id, request(i).token)
    clock.advance(4 * 60)
    for i in (0, 1):
        assert blue.acquire(request(i)).granted
        cordon(api, request(i))

    # When that backup is put back: the ConfigMap deleted and created again from it (Velero), or its data replaced
    # in the ConfigMap as it is (`kubectl replace` of the saved manifest)
    if how == "restored":
        restore(server, saved)
    else:
        current = backup(server)
        current.data = saved.data
        admin_api(server).replace_namespaced_config_map(NAME, NAMESPACE, current)
    clock.advance(5)

    # Then the drains in progress are counted from their nodes: a third node waits
    third = blue.acquire(request(2))
    assert (third.granted, third.reason, third.holders) == (False, SlotReason.NO_ROOM, 2)
    assert {h.node for h in blue.snapshot().holders} == {node_name(0), node_name(1)}
    api.api_client.close()
