"""What the tests of a budget ConfigMap that refuses the budget's writes share (see tests/integration/budget:
crowded near the API server's 1 MiB by keys the budget does not write, made immutable): on the sandbox API server,
stack blue's budget of one slot held by node 0's drain, a backup pasted beside the document by hand, and the asks
the ConfigMap then refuses before any write is sent."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kubernetes import client

from nodecycle.domain.ports.cluster import Refused
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE, add_nodes, admin_api
from tests.integration.budget.test_configmap_recreated import budget_of, request
from tests.unit.budget.fakes import FakeClock

MIB = 1024 * 1024  # the API server's bound on a ConfigMap's data
CONFIGMAP = "nodecycle-budget"
BACKUP = "backup.json"


def held_by_node_0(server: KubeServer, api: client.CoreV1Api) -> FakeClock:
    """Given 6 nodes over three zones and stack blue's budget of one slot (in all and per zone) granted to node 0's
    drain through ``api``: the budget's clock."""
    add_nodes(server, 6)
    clock = FakeClock()
    assert budget_of(api, clock, "blue", "1", "1").acquire(request(0)).granted
    return clock


def room_beside_the_budget(admin: client.CoreV1Api, short_of_a_mib: int) -> int:
    """The bytes a key put beside the budget's keys as they stand may take, to fill the ConfigMap's data (its values,
    as the API server counts them) to ``short_of_a_mib`` bytes short of 1 MiB."""
    data: dict[str, str] = admin.read_namespaced_config_map(CONFIGMAP, NAMESPACE).data or {}
    return MIB - sum(len(value.encode()) for value in data.values()) - short_of_a_mib


def paste_a_backup(server: KubeServer, short_of_a_mib: int) -> int:
    """Someone pastes a backup (BACKUP) beside the document, with the administrator's client, that fills the
    ConfigMap's data to ``short_of_a_mib`` bytes short of 1 MiB: its size."""
    admin = admin_api(server)
    backup = room_beside_the_budget(admin, short_of_a_mib)
    admin.patch_namespaced_config_map(CONFIGMAP, NAMESPACE, {"data": {BACKUP: "x" * backup}})
    admin.api_client.close()
    return backup


def move_the_backup_out(server: KubeServer) -> None:
    """The backup moved out by hand (the only way out of a crowded ConfigMap)."""
    admin = admin_api(server)
    admin.patch_namespaced_config_map(CONFIGMAP, NAMESPACE, {"data": {BACKUP: None}})
    admin.api_client.close()


def refusals_later(server: KubeServer, clock: FakeClock, *asks: Callable[[], object]) -> list[Refused]:
    """Each of ``asks`` made 200 s on (node 0's renewal due), each refused: the refusals. The API server's counters
    start from the first ask (to tell whether a write was sent to be refused)."""
    clock.advance(200)
    server.reset_counters()
    refusals = []
    for ask in asks:
        with pytest.raises(Refused) as refused:
            ask()
        refusals.append(refused.value)
    return refusals
