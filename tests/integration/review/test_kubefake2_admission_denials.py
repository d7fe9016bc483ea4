"""Admission's denials in each of the answers a real cluster gives, met by each of the product's writes that
admission judges: a webhook's deny as today's kube-apiserver words it (403 Forbidden), a webhook's deny without a
code on an older one (400, no reason), a ValidatingAdmissionPolicy's deny (422 Invalid). Each is that object's
answer (a Refused, a refused eviction), which no retry changes: never a transient error retried into the
dead-letter queue, never an error the step does not know."""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import pytest
from kubernetes import client

from nodecycle.adapters.kube.budget import BudgetWriteRefused
from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.adapters.kube.core_v1 import CoreV1
from nodecycle.domain.ports.cluster import Eviction, Refused
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import act_as_drain, add_nodes, core_api
from tests.integration.budget.test_configmap_recreated import budget_of, request
from tests.integration.kube.cluster import drain_cluster, drain_server
from tests.integration.kube.test_kube_adapter import NODE_A, SEED
from tests.unit.budget.fakes import FakeClock

WEBHOOK = 'admission webhook "policy.chaos.nodecycle.io" denied the request'
POLICY = (
    "ValidatingAdmissionPolicy 'chaos.nodecycle.io' with binding 'chaos.nodecycle.io-binding' denied request"
)
# The seed whose dice draw each answer first (tests/sandbox/kube/test_faults.py shows all three are drawn), and
# the words that tell it
ANSWERS = [
    pytest.param(6, f"is forbidden: {WEBHOOK}", id="webhook-403"),
    pytest.param(1, WEBHOOK, id="webhook-400"),
    pytest.param(3, f"is forbidden: {POLICY}", id="policy-422"),
]


def _deny(server: KubeServer, target: str, seed: int) -> None:
    server.faults.arm([Fault("deny", "kube-webhook-deny", target=target, limit=1)], seed=seed)


@pytest.fixture
def cluster_server() -> Iterator[tuple[KubeCluster, KubeServer]]:
    with drain_server(SEED) as server, drain_cluster(server) as cluster:
        yield cluster, server


@pytest.mark.parametrize(("seed", "words"), ANSWERS)
def test_a_denied_cordon_eviction_or_delete_is_that_objects_refusal(
    cluster_server: tuple[KubeCluster, KubeServer], seed: int, words: str
) -> None:
    cluster, server = cluster_server
    node = cluster.get_node(NODE_A)
    assert node is not None
    pod = next(pod for pod in cluster.pods_on(NODE_A) if pod.controller_kind == "ReplicaSet")

    # When admission denies the claim's cordon, Then it is the node's refusal in the server's words; not cordoned
    _deny(server, "PATCH nodes", seed)
    with pytest.raises(Refused) as cordon:
        cluster.claim_node(node, owner="stack-a", in_progress="{}", cordon=True, exclude_from_lb=False)
    assert words in str(cordon.value)
    stored = server.get_object("nodes", NODE_A)
    assert stored is not None
    assert not stored["spec"].get("unschedulable")

    # When it denies a pod's eviction, Then that pod's eviction is refused (the others must still be asked)
    _deny(server, "POST pods/eviction", seed)
    evicted = cluster.evict(pod, grace_seconds=5)
    assert evicted.kind is Eviction.REFUSED
    assert words in evicted.detail

    # When it denies the pod's delete (the force policy's), Then it is that pod's refusal; the pod stays
    _deny(server, "DELETE pods", seed)
    with pytest.raises(Refused) as deleted:
        cluster.delete_pod(pod, grace_seconds=0)
    assert words in str(deleted.value)
    kept = server.get_object("pods", pod.name, pod.namespace)
    assert kept is not None
    assert not kept["metadata"].get("deletionTimestamp")
    assert server.faults.counts() == {"kube-webhook-deny": 1}
    server.faults.disarm()


@pytest.mark.parametrize("product_client", [False, True], ids=["CoreV1Api", "CoreV1"])
@pytest.mark.parametrize(("seed", "words"), ANSWERS)
def test_a_denied_budget_write_is_the_configmaps_refusal(seed: int, words: str, product_client: bool) -> None:
    with KubeServer(tls=True) as server:
        act_as_drain(server)
        add_nodes(server, 2)
        official = core_api(server)
        # the official client, and the product's CoreV1 the drain function is wired with (the same calls)
        api = cast("client.CoreV1Api", CoreV1(official.api_client)) if product_client else official
        clock = FakeClock()
        assert budget_of(api, clock, "blue", "1", "1").acquire(request(0)).granted

        # When admission denies the next write of the budget ConfigMap (node 1's ask)
        _deny(server, "PUT configmaps", seed)
        clock.advance(200)
        with pytest.raises(Refused) as refused:
            budget_of(api, clock, "blue", "1", "1").acquire(request(1))
        official.api_client.close()

    # Then the ask is the ConfigMap's write refused, naming it (its namespace too) and what the server said (not a
    # transient error, nor, for a webhook's 403, a role's RBAC refusal)
    assert server.faults.counts() == {"kube-webhook-deny": 1}
    assert isinstance(refused.value, BudgetWriteRefused)
    assert "nodecycle/nodecycle-budget" in str(refused.value)
    assert words in str(refused.value)
