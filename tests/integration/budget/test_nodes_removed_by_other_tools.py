"""Nodes another tool is removing, under BudgetCountUnavailable, through the budget's adapters on the sandbox API
server.

cluster-autoscaler's scale-down and Karpenter's disruption keep pods off a node they remove with a NoSchedule taint
of their own (``ToBeDeletedByClusterAutoscaler``: kubernetes/autoscaler, cluster-autoscaler/utils/taints;
``karpenter.sh/disrupted``: kubernetes-sigs/karpenter, pkg/apis/v1/taints.go), not with ``spec.unschedulable``
(cluster-autoscaler cordons too only with ``--cordon-node-before-terminating``, off by default), then evict its pods
and end its instance. Such a node is a disruption under way as a cordoned one is: an owner that counts unavailable
nodes counts it, or it drains its whole budget beside that tool's."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from nodecycle.adapters.kube.budget import KubeNodeInventory
from nodecycle.domain.budget import SlotReason
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import add_nodes, core_api, node_name
from tests.integration.budget.recreation import slot_of
from tests.integration.budget.test_released_nodes_counting_unavailable import counting_budget
from tests.unit.budget.fakes import FakeClock

CLUSTER_AUTOSCALER = {"key": "ToBeDeletedByClusterAutoscaler", "value": "1765090000", "effect": "NoSchedule"}
KARPENTER = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}
# cluster-autoscaler's mark of a node it may remove later: soft, the node serves on meanwhile
CANDIDATE = {
    "key": "DeletionCandidateOfClusterAutoscaler",
    "value": "1765090000",
    "effect": "PreferNoSchedule",
}


def taint(server: KubeServer, node: str, *taints: dict[str, Any]) -> None:
    api = core_api(server)
    try:
        api.patch_node(node, {"spec": {"taints": list(taints)}})
    finally:
        api.api_client.close()


@pytest.mark.parametrize("removal", [CLUSTER_AUTOSCALER, KARPENTER], ids=["cluster-autoscaler", "karpenter"])
def test_a_node_another_autoscaler_is_removing_is_counted_unavailable(
    server: KubeServer, core: client.CoreV1Api, removal: dict[str, Any]
) -> None:
    # Given 3 nodes: one that an autoscaler is removing (its taint, no cordon), one it only marks as a candidate
    add_nodes(server, 3)
    taint(server, node_name(1), removal)
    taint(server, node_name(2), CANDIDATE)

    # When an owner counting unavailable nodes lists them
    nodes = {n.name: n for n in KubeNodeInventory(lambda: core, with_status=True).nodes_in_scope()}

    # Then the node being removed is unavailable; the candidate and the untouched node are not
    assert [name for name, node in sorted(nodes.items()) if node.unavailable] == [node_name(1)]


def test_a_budget_of_one_counting_unavailable_nodes_waits_while_cluster_autoscaler_removes_a_node(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given 6 nodes, a budget of 1 counting unavailable nodes, and cluster-autoscaler removing node 1 (tainted,
    # its pods being evicted)
    add_nodes(server, 6)
    taint(server, node_name(1), CLUSTER_AUTOSCALER)
    blue = counting_budget(core, FakeClock(), "1")

    # When node 0's drain asks for a slot
    decision = blue.acquire(slot_of(0))

    # Then it waits: one node is already being disrupted
    assert not decision.granted
    assert decision.reason is not SlotReason.RELEASED
