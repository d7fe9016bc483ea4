"""The budget ConfigMap filled near the API server's 1 MiB limit for its data by keys the budget does not write (a
backup of the document pasted beside it by hand, a tool's notes): the budget keeps what others put there, so every
write of its document is refused (422 Too long), however small the document. Nothing but a person moving those keys
out mends it: the ConfigMap's answer, as a refused read is (a drain's poll evicts nothing and says why on its node;
an ask is retried up to its refused tries, then fails: the alarm), naming the keys; not a transient error retried
until its message is dead-lettered, logged as the document too large."""

from __future__ import annotations

import base64

from kubernetes import client

from nodecycle.adapters.kube.budget import BudgetCrowdedOut
from nodecycle.domain.budget import SlotReason
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE, admin_api, node_name
from tests.integration.budget.test_configmap_recreated import budget_of, polled, request
from tests.support.budget_refusals import (
    CONFIGMAP,
    held_by_node_0,
    move_the_backup_out,
    paste_a_backup,
    refusals_later,
    room_beside_the_budget,
)


def test_a_budget_crowded_out_of_its_configmap_by_others_keys_is_refused_naming_them(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given a budget of 1 held by node 0's drain
    clock = held_by_node_0(server, core)
    # When someone pastes a backup beside the document that fills the ConfigMap's data to 150 bytes short of 1 MiB
    # (less than a place in line takes)
    backup = paste_a_backup(server, short_of_a_mib=150)
    # ...and node 1 asks (its place in line would grow the document)
    [refused] = refusals_later(
        server, clock, lambda: budget_of(core, clock, "blue", "1", "1").acquire(request(1))
    )

    # Then it is refused, naming the key that takes the room, and no write was sent to be refused
    assert isinstance(refused, BudgetCrowdedOut)
    assert f"(backup.json: {backup} bytes)" in str(refused)
    assert ("update", "configmaps") not in server.counters()
    # ...while node 0's drain still renews its slot (a write that fits)
    assert budget_of(core, clock, "blue", "1", "1").renew(polled(0)).reason is SlotReason.HELD

    # And once the key is moved out, node 1 takes its place in line
    move_the_backup_out(server)
    after = budget_of(core, clock, "blue", "1", "1")
    assert after.acquire(request(1)).reason is SlotReason.NO_ROOM
    assert [w.node for w in after.snapshot().waiters] == [node_name(1)]


def test_a_budget_crowded_out_by_binary_data_is_refused_naming_its_key(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given a budget of 1 held by node 0's drain
    clock = held_by_node_0(server, core)
    # When someone puts a compressed backup beside the document as binaryData (counted by the API server, decoded,
    # against the same 1 MiB as data's values), 150 bytes short of it
    admin = admin_api(server)
    backup = room_beside_the_budget(admin, short_of_a_mib=150)
    encoded = base64.b64encode(b"\0" * backup).decode()
    admin.patch_namespaced_config_map(CONFIGMAP, NAMESPACE, {"binaryData": {"backup.json.gz": encoded}})
    admin.api_client.close()
    # ...and node 1 asks (its place in line would grow the document)
    [refused] = refusals_later(
        server, clock, lambda: budget_of(core, clock, "blue", "1", "1").acquire(request(1))
    )

    # Then it is refused, naming the key that takes the room, and no write was sent to be refused
    assert isinstance(refused, BudgetCrowdedOut)
    assert f"(backup.json.gz: {backup} bytes)" in str(refused)
    assert ("update", "configmaps") not in server.counters()
