"""The budget ConfigMap filled near the API server's 1 MiB limit for its data by keys the budget does not write (a
backup of the document pasted beside it by hand, a tool's notes): the budget keeps what others put there, so every
write of its document is refused (422 Too long), however small the document. Nothing but a person moving those keys
out mends it: the ConfigMap's answer, as a refused read is (a drain's poll evicts nothing and says why on its node;
an ask is retried up to its refused tries, then fails: the alarm), naming the keys; not a transient error retried
until its message is dead-lettered, logged as the document too large."""

from __future__ import annotations

import base64

import pytest
from kubernetes import client

from nodecycle.adapters.kube.budget import BudgetCrowdedOut
from nodecycle.domain.budget import SlotReason
from nodecycle.domain.ports.cluster import Refused
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE, add_nodes, admin_api, node_name
from tests.integration.budget.test_configmap_recreated import budget_of, polled, request
from tests.unit.budget.fakes import FakeClock

MIB = 1024 * 1024


def test_a_budget_crowded_out_of_its_configmap_by_others_keys_is_refused_naming_them(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given a budget of 1 held by node 0's drain
    add_nodes(server, 6)
    clock = FakeClock()
    assert budget_of(core, clock, "blue", "1", "1").acquire(request(0)).granted
    # When someone pastes a backup beside the document that fills the ConfigMap's data to 150 bytes short of 1 MiB
    # (less than a place in line takes)
    admin = admin_api(server)
    data: dict[str, str] = admin.read_namespaced_config_map("nodecycle-budget", NAMESPACE).data or {}
    backup = MIB - sum(len(value.encode()) for value in data.values()) - 150
    admin.patch_namespaced_config_map("nodecycle-budget", NAMESPACE, {"data": {"backup.json": "x" * backup}})
    clock.advance(200)
    server.reset_counters()
    # ...and node 1 asks (its place in line would grow the document)
    with pytest.raises(Refused) as refused:
        budget_of(core, clock, "blue", "1", "1").acquire(request(1))

    # Then it is refused, naming the key that takes the room, and no write was sent to be refused
    assert isinstance(refused.value, BudgetCrowdedOut)
    assert f"(backup.json: {backup} bytes)" in str(refused.value)
    assert ("update", "configmaps") not in server.counters()
    # ...while node 0's drain still renews its slot (a write that fits)
    assert budget_of(core, clock, "blue", "1", "1").renew(polled(0)).reason is SlotReason.HELD

    # And once the key is moved out, node 1 takes its place in line
    admin.patch_namespaced_config_map("nodecycle-budget", NAMESPACE, {"data": {"backup.json": None}})
    admin.api_client.close()
    after = budget_of(core, clock, "blue", "1", "1")
    assert after.acquire(request(1)).reason is SlotReason.NO_ROOM
    assert [w.node for w in after.snapshot().waiters] == [node_name(1)]


def test_a_budget_crowded_out_by_binary_data_is_refused_naming_its_key(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given a budget of 1 held by node 0's drain
    add_nodes(server, 6)
    clock = FakeClock()
    assert budget_of(core, clock, "blue", "1", "1").acquire(request(0)).granted
    # When someone puts a compressed backup beside the document as binaryData (counted by the API server, decoded,
    # against the same 1 MiB as data's values), 150 bytes short of it
    admin = admin_api(server)
    data: dict[str, str] = admin.read_namespaced_config_map("nodecycle-budget", NAMESPACE).data or {}
    backup = MIB - sum(len(value.encode()) for value in data.values()) - 150
    encoded = base64.b64encode(b"\0" * backup).decode()
    admin.patch_namespaced_config_map(
        "nodecycle-budget", NAMESPACE, {"binaryData": {"backup.json.gz": encoded}}
    )
    admin.api_client.close()
    clock.advance(200)
    server.reset_counters()
    # ...and node 1 asks (its place in line would grow the document)
    with pytest.raises(Refused) as refused:
        budget_of(core, clock, "blue", "1", "1").acquire(request(1))

    # Then it is refused, naming the key that takes the room, and no write was sent to be refused
    assert isinstance(refused.value, BudgetCrowdedOut)
    assert f"(backup.json.gz: {backup} bytes)" in str(refused.value)
    assert ("update", "configmaps") not in server.counters()
