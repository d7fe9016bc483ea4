"""A node that carries only the beta zone label (``failure-domain.beta.kubernetes.io/zone``: a node registered
before Kubernetes 1.17 and never relabelled, or labelled by a tool of that age; the kubelet and the cloud node
controller apply both labels since, and the scheduler and the volume zone helpers read either). The drain reads its
node's zone from either label (``cluster_api.node_info``); the budget's scope read the GA label alone, so the same
node was of its zone in its drain's ask and of no zone in the scope: a per-zone percent of a zone whose nodes carry
the beta label only resolved to the limit of a zone without nodes (1, whatever the percent), and such a node counted
as unavailable counted against every zone. Through the budget's adapters on the sandbox API server."""

from __future__ import annotations

from datetime import timedelta

from kubernetes import client

from nodecycle.adapters.kube.budget import ConfigMapBudgetStore, KubeDrainsInProgress, KubeNodeInventory
from nodecycle.adapters.kube.cluster_api import LEGACY_ZONE_LABEL, KubeCluster
from nodecycle.domain.budget import BudgetLimits, DisruptionBudget
from nodecycle.domain.policy import Quantity
from nodecycle.domain.ports.cluster import ZONE_LABEL
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE, add_nodes, admin_api, node_name, zone_of
from tests.integration.budget.drains import SharedMetrics
from tests.integration.budget.recreation import slot_of
from tests.integration.budget.test_configmap_recreated import TTL
from tests.unit.budget.fakes import FakeClock


def beta_labels_only(server: KubeServer, count: int) -> None:
    """``count`` nodes over three zones, each with the beta zone label alone."""
    add_nodes(server, count)
    admin = admin_api(server)
    for i in range(count):
        admin.patch_node(
            node_name(i), {"metadata": {"labels": {ZONE_LABEL: None, LEGACY_ZONE_LABEL: zone_of(i)}}}
        )


def test_the_scope_sees_a_node_of_the_beta_zone_label_in_the_zone_its_drain_asks_with(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given 3 nodes labelled with the beta zone label alone
    beta_labels_only(server, 3)
    drain = KubeCluster(lambda: core.api_client)

    # When the budget lists its scope, whole nodes or their metadata alone
    for with_status in (True, False):
        scope = KubeNodeInventory(lambda: core, with_status=with_status).nodes_in_scope()

        # Then each node is in the zone its drain reads on it
        for node in scope:
            read = drain.get_node(node.name)
            assert read is not None
            assert node.zone == read.zone == zone_of(int(node.name.split("-")[3]) - 1)


def test_a_per_zone_percent_is_of_the_nodes_of_the_beta_zone_label(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given 12 nodes over three zones (4 in each) with the beta zone label alone, and a budget of 50% per zone
    beta_labels_only(server, 12)
    blue = DisruptionBudget(
        store=ConfigMapBudgetStore(lambda: core, NAMESPACE, sleep=lambda _: None),
        nodes=KubeNodeInventory(lambda: core, with_status=False, max_age=timedelta(0)),
        clock=FakeClock(),
        metrics=SharedMetrics(),
        limits=BudgetLimits(Quantity.parse("100%"), Quantity.parse("50%")),
        holder_ttl=TTL,
        count_unavailable=False,
        owner="blue",
        drains=KubeDrainsInProgress(lambda: core),
    )

    # When the drains of the 4 nodes of zone a ask, each with the zone its node shows
    granted = [blue.acquire(slot_of(i)).granted for i in (0, 3, 6, 9)]

    # Then 2 of them go (50% of 4), not 1
    assert granted == [True, True, False, False]
