"""A percent limit read from the API server while the nodes of terminated instances linger: their node objects
stay listed (cordoned, their kubelet gone) until the cloud provider deletes them, and are no capacity."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.adapters.kube.budget import ConfigMapBudgetStore, KubeNodeInventory
from nodecycle.domain.budget import BudgetLimits, DisruptionBudget, SlotRequest
from nodecycle.domain.policy import Quantity
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE, core_api, instance_of, node_name, zone_of
from tests.integration.budget.drains import SharedMetrics, WallClock


def request(i: int) -> SlotRequest:
    return SlotRequest(
        node=node_name(i), instance_id=instance_of(i), zone=zone_of(i), owner="blue", record_id=f"rec-{i}"
    )


@pytest.mark.parametrize("with_status", [False, True], ids=["metadata", "status"])
def test_a_percent_is_of_the_nodes_there_not_of_the_objects_of_terminated_instances(
    server: KubeServer, with_status: bool
) -> None:
    api = core_api(server)
    budget = DisruptionBudget(
        store=ConfigMapBudgetStore(lambda: api, NAMESPACE),
        # listed afresh at every decision: what is asserted is the reading, not the cache
        nodes=KubeNodeInventory(lambda: api, max_age=timedelta(0), with_status=with_status),
        clock=WallClock(),
        metrics=SharedMetrics(),
        limits=BudgetLimits(Quantity.parse("50%")),
        holder_ttl=timedelta(seconds=60),
        count_unavailable=with_status,
        owner="blue",
    )
    for i in range(4):
        server.add_node(node_name(i), instance_id=instance_of(i), zone=zone_of(i))

    # Given nodes 0 and 1 drained (cordoned), given back, and their instances terminated: their node objects
    # linger without a kubelet; then two replacements join
    for i in (0, 1):
        assert budget.acquire(request(i)).granted
        api.patch_node(node_name(i), {"spec": {"unschedulable": True}})
        assert server.instance_terminated(node_name(i))
        budget.release(node_name(i), f"rec-{i}")
    for i in (4, 5):
        server.add_node(node_name(i), instance_id=instance_of(i), zone=zone_of(i))
    assert len(api.list_node().items) == 6

    # When the 4 nodes that are there ask: 50% of them is 2
    assert budget.acquire(request(2)).granted
    assert budget.acquire(request(3)).granted

    # Then a third waits: 50% of the 6 node objects would have let 3 of the 4 go
    assert not budget.acquire(request(4)).granted
    api.api_client.close()
