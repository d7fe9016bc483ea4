"""What the tests of a budget that refuses or fails the budget's writes share (see tests/integration/budget: the
ConfigMap crowded near the API server's 1 MiB by keys the budget does not write, made immutable, the stack's
binding to its Role gone, its reads failing): on the sandbox API server, stack blue's budget of one slot held by
node 0's drain, a backup pasted beside the document by hand, the asks the ConfigMap then refuses before any write
is sent; and node 0's drain kept at its eviction by a pod its PodDisruptionBudget keeps, polled as the engine polls
it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

import pytest
from kubernetes import client

from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.ports.cluster import Refused
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE, add_nodes, admin_api, core_api, node_name
from tests.integration.budget.test_configmap_recreated import budget_of, request
from tests.unit.budget.fakes import FakeClock

if TYPE_CHECKING:  # (kubernetes.client loads its models lazily: these two alone are some 160 modules)
    from kubernetes.client import V1Pod, V1PodDisruptionBudget

    from nodecycle.domain.budget import DisruptionBudget, SlotRequest
    from nodecycle.domain.engine import Outcome
    from tests.support.fakes import InMemoryRecords

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


def web_pod(node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "default", "labels": {"app": "web"}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "web", "image": "example.com/web:1"}],
        },
    }


def keep_a_pod_on(server: KubeServer, node: str) -> None:
    """A pod on ``node`` that a PodDisruptionBudget keeps (minAvailable 1 of 1): each poll asks it to leave again."""
    admin = admin_api(server)
    admin.create_namespaced_pod("default", cast("V1Pod", web_pod(node)))
    client.PolicyV1Api(admin.api_client).create_namespaced_pod_disruption_budget(
        "default",
        cast(
            "V1PodDisruptionBudget",
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
            },
        ),
    )
    admin.api_client.close()
    server.settle()  # (its budget observed by its controller: no room)


def as_stored(record: LifecycleRecord, outcome: Outcome) -> LifecycleRecord:
    """``record`` as the engine stores it after a step's ``outcome``: the changes that are its fields."""
    return record.model_copy(
        update={key: value for key, value in outcome.changes.items() if key in LifecycleRecord.model_fields}
    )


@dataclass
class KeptDrain:
    """Stack blue's drain of node 0 at its eviction under a budget of one slot (its slot held, its node claimed),
    whose pod a PodDisruptionBudget keeps: on the sandbox API server through the drain function's client (``api``),
    its record as the engine last stored it."""

    server: KubeServer
    api: client.CoreV1Api
    clock: FakeClock
    records: InMemoryRecords
    blue: DisruptionBudget
    slot: SlotRequest
    record: LifecycleRecord

    def evictions(self) -> int:
        """The evictions asked of the API server so far."""
        return self.server.counters().get(("create", "pods/eviction"), 0)

    def poll(self) -> Outcome:
        """A poll of its EVICT step, wired as the drain function wires it, at the clock's now on its record as
        stored (not stored again: see :meth:`stored`)."""
        from tests.integration.budget.recreation import evict_step  # (see kept_drain)

        return evict_step(self.api, self.blue, self.slot)(self.record, self.clock.now())

    def stored(self, outcome: Outcome) -> Outcome:
        """``outcome``, its record stored after it as the engine stores it."""
        self.record = as_stored(self.record, outcome)
        return outcome


def kept_drain(server: KubeServer, global_deadline: datetime | None = None) -> KeptDrain:
    """Given 6 nodes over three zones, stack blue's budget of one slot held by its drain of node 0 (claimed, its
    record at its eviction: see recreation.in_progress), whose pod a PodDisruptionBudget keeps (each poll asks it to
    leave again): the drain, its record's global deadline at ``global_deadline`` (None: intake's)."""
    # (imported here: the drain's steps and the tests they come from are some 180 modules more, which the tests of
    # the ConfigMap's refusals alone would import at each collection for nothing)
    from tests.integration.budget.recreation import in_progress, lifecycle_of, six_nodes, slot_of

    api = core_api(server)
    clock, records, blue = six_nodes(server, api, total="1")
    slot = slot_of(0)
    in_progress(api, blue, records, slot)
    keep_a_pod_on(server, node_name(0))
    record = lifecycle_of(slot, Step.EVICT, seq=3)
    if global_deadline is not None:
        record = record.model_copy(update={"global_deadline": global_deadline})
    return KeptDrain(server, api, clock, records, blue, slot, record)
