"""The budget's sweep and a slot whose node object was deleted while its instance runs (``kubectl delete node``, a
tool that deletes Node objects). Deleting a Node removes the object only: its pods stay bound to its name, running,
and its drain evicts them under its slot (drain/orphans.py, ``Evict._node_deleted``) until the pod garbage
collector force-deletes what is left after its 40 s quarantine (kube-controller-manager pkg/controller/podgc,
gcOrphaned). A node missing from the sweeper's list is not a drain over: the slot is swept when its lifecycle is
(its record, read consistently), not before. On the real Kubernetes adapter against the sandbox's API server, the
deleted node's pods kept past the test by a long quarantine."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.kube.access import AccessEntry
from tests.integration.budget.conftest import act_as_drain, add_nodes, node_name
from tests.integration.budget.test_configmap_recreated import budget_of, cordon, request
from tests.integration.budget.test_sweep_from_a_lagging_watch_cache import (
    SWEEPER_KEY,
    SWEEPER_ROLE,
    sweep_budget,
)
from tests.support.fakes import InMemoryRecords
from tests.unit.budget.fakes import FakeClock
from tests.unit.foundation.test_engine import PLAN, make_record

QUARANTINE = 600.0  # longer than any test: the deleted node's pods stay bound to its name throughout
WORKLOAD = {"namespaces": ["shop"], "deployments": [{"name": "web", "namespace": "shop", "replicas": 4}]}


@pytest.fixture
def server() -> Iterator[KubeServer]:
    with KubeServer(tls=True, pod_gc_quarantine_seconds=QUARANTINE) as started:
        act_as_drain(started)
        started.add_access_entries([AccessEntry(SWEEPER_ROLE, ("nodecycle-sweeper",))])
        started.map_role(SWEEPER_KEY, SWEEPER_ROLE, "nodecycle-SweeperFunction")
        add_nodes(started, 2)
        started.seed(WORKLOAD)
        started.settle()
        yield started


def lifecycle(i: int, step: Step) -> LifecycleRecord:
    slot = request(i)
    return make_record(
        PLAN, step, id=slot.record_id, instance_id=slot.instance_id, token=slot.token, owner="blue"
    )


def pods_bound_to(server: KubeServer, node: str) -> list[str]:
    return [
        pod["metadata"]["name"]
        for pod in server.objects("pods", "shop")
        if pod["spec"].get("nodeName") == node
    ]


def test_the_slot_of_a_drain_evicting_from_its_deleted_node_is_not_swept(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given a budget of 1, node 0 draining under its slot, node 1 waiting in line for it
    clock = FakeClock()
    blue = budget_of(core, clock, "blue", total="1", per_zone="1")
    records = InMemoryRecords()
    drains = [lifecycle(0, Step.EVICT), lifecycle(1, Step.ACQUIRE_SLOT)]
    for drain in drains:
        records.create(drain)
    assert blue.acquire(request(0)).granted
    cordon(core, request(0))
    assert not blue.acquire(request(1)).granted
    # ...and node 0's object deleted while its instance runs: its pods stay bound to its name, which its drain
    # evicts under its slot
    assert pods_bound_to(server, node_name(0))
    assert server.remove_node(node_name(0))
    assert pods_bound_to(server, node_name(0))

    # When the sweeper sweeps the budget, both lifecycles open
    counts = sweep_budget(server, blue, records, drains, clock)

    # Then node 0's drain keeps its slot: node 1 is not granted it while node 0's pods are being evicted
    assert counts == {"SweptHolders": 0, "SweptWaiters": 0}
    assert [h.node for h in blue.snapshot().holders] == [node_name(0)]
    assert not blue.acquire(request(1)).granted


def test_the_slot_of_a_deleted_node_whose_lifecycle_is_over_is_swept(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given node 0's slot, its node object deleted, and its lifecycle over (its release lost) though the sweep's
    # snapshot of the open lifecycles (an index that lags) still has it
    clock = FakeClock()
    blue = budget_of(core, clock, "blue", total="1", per_zone="1")
    records = InMemoryRecords()
    drain = lifecycle(0, Step.EVICT)
    records.create(drain.model_copy(update={"step": Step.DONE}))
    assert blue.acquire(request(0)).granted
    assert server.remove_node(node_name(0))

    # When the sweeper sweeps the budget
    counts = sweep_budget(server, blue, records, [drain], clock)

    # Then the slot is swept, and the next node may take it
    assert counts == {"SweptHolders": 1, "SweptWaiters": 0}
    assert blue.snapshot().holders == []
    assert blue.acquire(request(1)).granted
