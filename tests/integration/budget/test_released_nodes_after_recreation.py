"""A percent limit after the budget ConfigMap was created again, while the node objects of drains that just
ended linger (until the cloud provider deletes them). The budget's marks of those slots given back took them out
of the percent's nodes, and go with the ConfigMap; the drain's cleanup now marks a node whose instance leaves
service released for its lifecycle (``nodecycle.io/released-for``), and the inventory reads it, so a percent is
still of the nodes that serve. Through the Cleanup step and the budget's adapters on the sandbox API server (see
tests/unit/budget/test_percent_scope_after_recreation.py for the budget alone)."""

from __future__ import annotations

from dataclasses import replace

from kubernetes import client

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.model import Step
from nodecycle.domain.ports.cluster import IN_PROGRESS_ANNOTATION, RELEASED_FOR_ANNOTATION
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import add_nodes, node_name
from tests.integration.budget.test_configmap_recreated import budget_of, cordon, recreate_the_configmap
from tests.integration.budget.test_late_polls_after_recreation import lifecycle_of, slot_of
from tests.unit.budget.fakes import FakeClock
from tests.unit.drain.test_drain_steps import cleanup


def test_the_nodes_of_drains_just_ended_stay_out_of_a_percent_after_the_configmap_is_recreated(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given 6 nodes, a budget of 50%, and the drains of nodes 4 and 5 ended by their cleanups (their instances
    # terminating, their node objects still there)
    add_nodes(server, 6)
    clock = FakeClock()
    blue = budget_of(core, clock, "blue", total="50%", per_zone="6")
    cluster = KubeCluster(lambda: core.api_client)
    for i in (4, 5):
        assert blue.acquire(slot_of(i)).granted
        cordon(core, slot_of(i))
        ended = cleanup(cluster, blue)(lifecycle_of(slot_of(i), Step.CLEANUP, seq=5), clock.now())  # type: ignore[arg-type]
        assert (ended.then, ended.again) == (None, False)  # on to its next step, its slot given back
        found = server.get_object("nodes", node_name(i))
        assert found is not None
        annotations = found["metadata"].get("annotations") or {}
        assert IN_PROGRESS_ANNOTATION not in annotations
        assert annotations.get(RELEASED_FOR_ANNOTATION) == slot_of(i).record_id
        assert found["spec"].get("unschedulable") is True

    # When the ConfigMap is created again, and the next lifecycles of nodes 0 to 3 ask
    recreate_the_configmap(server)
    clock.advance(5)
    blue = budget_of(core, clock, "blue", total="50%", per_zone="6")  # (another run: its nodes listed afresh)
    granted = [blue.acquire(replace(slot_of(i), record_id=f"next-{i}")).granted for i in range(4)]

    # Then 2 of the 4 nodes that serve go at once, not 3 (50% of 6)
    assert granted.count(True) == 2
