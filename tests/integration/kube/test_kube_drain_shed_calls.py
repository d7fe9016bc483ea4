"""A drain's calls for its pods that the API server sheds with a Retry-After, on the real Kubernetes adapter
against the sandbox API server: a 429 of API Priority and Fairness to a forced delete says the server's state,
not that pod's. The pass stops there (asking the other pods now only adds to the load it sheds) and the next
poll comes no sooner than the server said, as a throttled eviction's does."""

from __future__ import annotations

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube import test_kube_drain_steps as drain_steps
from tests.integration.kube.cluster import evict_step
from tests.integration.kube.test_kube_drain_steps import DEADLINE, INSTANCE, NODE, draining
from tests.support.fakes import FakeMetrics

SEED = drain_steps.SEED


def test_a_forced_delete_the_api_server_sheds_ends_the_pass_and_the_next_poll_waits_its_retry_after(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain past its timeout (force policy), and an API server shedding deletes: Retry-After 20 s
    server.faults.arm([Fault("shed", "kube-throttle", "DELETE pods", value=20)], seed=1)
    metrics = FakeMetrics()
    step = evict_step(cluster, NODE, INSTANCE, metrics=metrics)

    # When the force policy deletes the node's pods
    outcome = step(draining(extra={"polls": 1}), DEADLINE)

    # Then one delete was asked, and the next poll waits what the server said
    assert len(server.faults.firings()) == 1
    assert outcome.changes["forced_at"] == DEADLINE
    assert outcome.delay == 20
