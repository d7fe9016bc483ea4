"""The nodes in the budget's scope: FakeInventory (tests/unit/budget/fakes.py, its nodes made by ``node()``)
and KubeNodeInventory on the sandbox's API server (the drain function's RBAC, whole nodes: counting
unavailable ones) answer alike for the same nodes.

What the budget relies on: a node's zone (None without the label), cordoned (not schedulable), NotReady, and
the shutdown taint of a stopped instance, each as ``node()`` says it. (The real inventory may serve a list
up to ``max_age`` old, which the fake never does: see KubeNodeInventory on why stale counts are safe.)"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from nodecycle.adapters.kube.budget import SHUTDOWN_TAINT, KubeNodeInventory
from nodecycle.domain.budget import NodeState
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import act_as_drain, admin_api, core_api
from tests.unit.budget.fakes import FakeInventory, node

# As node() makes them for a unit test, and as a cluster holds them
NODES = {
    "ready": node("ready", "eu-west-1a"),
    "cordoned": node("cordoned", "eu-west-1b", schedulable=False),
    "not-ready": node("not-ready", "eu-west-1c", ready=False),
    "stopped": node("stopped", "eu-west-1a", ready=False, shut_down=True),
    "no-zone": node("no-zone", None),
}


@pytest.fixture(scope="module")
def cluster() -> Iterator[KubeServer]:
    with KubeServer(tls=True) as kube:
        act_as_drain(kube)
        admin = admin_api(kube)
        for i, (name, state) in enumerate(NODES.items()):
            kube.add_node(
                name,
                instance_id=f"i-0{i:016x}",
                zone=state.zone or "",
                labels={"pool": "a" if i % 2 else "b"},
            )
            if state.zone is None:
                admin.patch_node(name, {"metadata": {"labels": {"topology.kubernetes.io/zone": None}}})
            if not state.schedulable:
                admin.patch_node(name, {"spec": {"unschedulable": True}})
            if not state.ready:
                kube.set_node_ready(name, False)
            if state.shut_down:
                admin.patch_node(
                    name, {"spec": {"taints": [{"key": SHUTDOWN_TAINT, "effect": "NoSchedule"}]}}
                )
        yield kube
        admin.api_client.close()


@pytest.fixture(params=["fake", "api-server"])
def inventory(request: pytest.FixtureRequest) -> Iterator[tuple[str, FakeInventory | KubeNodeInventory]]:
    if request.param == "fake":
        yield "fake", FakeInventory(list(NODES.values()))
        return
    kube: KubeServer = request.getfixturevalue("cluster")
    api = core_api(kube)
    yield "api-server", KubeNodeInventory(lambda: api, max_age=timedelta(0))
    api.api_client.close()


def test_each_nodes_state_is_read_as_node_makes_it(
    inventory: tuple[str, FakeInventory | KubeNodeInventory],
) -> None:
    _, nodes = inventory
    read: dict[str, NodeState] = {n.name: n for n in nodes.nodes_in_scope()}
    assert read == NODES
