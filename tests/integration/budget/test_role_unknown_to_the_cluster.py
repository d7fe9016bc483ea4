"""The drain's steps against a cluster that no longer knows the drain function's role (its EKS access entry
deleted, or the stack's role recreated under another ARN): every request is answered 401, also the client's retry
with a fresh token. That is a refusal as a 403 is (RBAC without the verb), which the steps decide on (told, the
alarm, asked again at each poll, settled at the drain timeout), not a bare ApiException that failed each message
until the dead-letter queue. On the real adapter against the sandbox API server and its authentication."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.model import Step
from nodecycle.domain.ports.cluster import Eviction, Refused
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import DRAIN_ROLE
from tests.integration.kube.cluster import drain_cluster, drain_server, evict_step
from tests.integration.kube.test_kube_drain_steps import INSTANCE, NODE, SEED, draining
from tests.support.fakes import T0, FakeMetrics
from tests.unit.drain.test_drain_steps import FakeEvents


@pytest.fixture
def server() -> Iterator[KubeServer]:
    with drain_server(SEED) as kube:
        yield kube


@pytest.fixture
def cluster(server: KubeServer) -> Iterator[KubeCluster]:
    with drain_cluster(server) as adapter:
        yield adapter


def forget_the_role(server: KubeServer) -> None:
    """The function's key is now a session of a role the cluster has no access entry for: 401 at every call."""
    server.map_role("FOOBARKEY", DRAIN_ROLE.replace("DrainFunction", "Recreated"), "nodecycle-DrainFunction")


def test_each_call_of_a_drain_is_refused_when_the_cluster_no_longer_knows_its_role(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given the node and a pod as a drain read them, and then the role's access entry gone
    node = cluster.get_node(NODE)
    assert node is not None
    pod = next(p for p in cluster.pods_on(NODE) if p.controller_kind == "ReplicaSet")
    forget_the_role(server)

    # Then each read, the cordon's claim and the force policy's delete are refused (as a 403 is), and an
    # eviction is that pod's refusal: none is a bare error for the queue
    with pytest.raises(Refused):
        cluster.get_node(NODE)
    with pytest.raises(Refused):
        cluster.pods_on(NODE)
    with pytest.raises(Refused):
        cluster.claim_node(node, owner="blue", in_progress="{}", cordon=True, exclude_from_lb=False)
    assert cluster.evict(pod, 30).kind is Eviction.REFUSED
    with pytest.raises(Refused):
        cluster.delete_pod(pod, 30)


def test_a_drain_polling_while_the_cluster_no_longer_knows_its_role_is_told_and_asked_again_at_the_poll(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain in progress, and the role's access entry deleted
    forget_the_role(server)
    metrics, events = FakeMetrics(), FakeEvents()

    # When it polls
    outcome = evict_step(cluster, NODE, INSTANCE, metrics=metrics, events=events)(draining(Step.EVICT), T0)

    # Then it waits its poll, the refusal counted for the alarm, rather than its message failing
    assert (outcome.then, outcome.again) == (None, True)
    assert metrics.counts["EvictionErrors"] == 1
