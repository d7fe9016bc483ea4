"""The Kubernetes adapter over real HTTPS: EKS access (endpoint + CA + token), nodes, pods, evictions.

The in-memory API server speaks the wire protocol, so the content types, the 409s and the Status bodies the
adapter relies on are exercised for real; the adapter's token is the drain function's, so what it does is
what deploy/rbac.yaml grants that function.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import CoreV1Api, V1Container, V1ObjectMeta, V1Pod, V1PodSpec, VersionApi

from nodecycle.adapters.kube import cluster_api, eks_access
from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.adapters.kube.eks_access import EksCluster, EksTokens
from nodecycle.domain.errors import TransientError
from nodecycle.domain.ports.cluster import OWNER_ANNOTATION, Claim, Eviction, EvictionResult, Refused
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import drain_cluster, drain_server, eks_describing

NODE_A = "ip-10-0-1-10.eu-west-1.compute.internal"
NODE_B = "ip-10-0-2-10.eu-west-1.compute.internal"
SEED = {
    "namespaces": ["shop"],
    "nodes": [
        {"privateIp": "10.0.1.10", "instanceId": "i-0a1b2c3d4e5f60101", "zone": "eu-west-1a"},
        {"privateIp": "10.0.2.10", "instanceId": "i-0a1b2c3d4e5f60201", "zone": "eu-west-1b"},
    ],
    "daemonSets": [{"name": "kube-proxy", "namespace": "kube-system"}],
    "deployments": [{"name": "web", "namespace": "shop", "replicas": 4, "pdb": {"maxUnavailable": 1}}],
}


def test_the_node_of_an_instance_is_found_by_provider_id_and_by_private_dns_name(
    cluster: KubeCluster, server: KubeServer
) -> None:
    by_provider = cluster.find_node("i-0a1b2c3d4e5f60201", None)
    assert by_provider is not None
    assert (by_provider.name, by_provider.zone, by_provider.ready) == (NODE_B, "eu-west-1b", True)
    server.reset_counters()
    by_dns = cluster.find_node("i-0a1b2c3d4e5f60101", NODE_A)
    assert by_dns is not None
    assert by_dns.name == NODE_A
    assert server.counters() == {("get", "nodes"): 1}  # the DNS name hit: no node list
    assert cluster.find_node("i-0ffffffffffffffff", None) is None


def test_claim_sets_both_annotations_and_the_cordon_in_one_patch(
    cluster: KubeCluster, server: KubeServer
) -> None:
    node = cluster.get_node(NODE_A)
    assert node is not None
    server.reset_counters()
    claim = cluster.claim_node(
        node, owner="stack-a", in_progress='{"token":"t"}', cordon=True, exclude_from_lb=True
    )
    assert claim is Claim.CLAIMED
    assert server.counters() == {("patch", "nodes"): 1}
    stored = server.get_object("nodes", NODE_A)
    assert stored is not None
    assert stored["spec"]["unschedulable"] is True
    assert stored["metadata"]["annotations"][OWNER_ANNOTATION] == "stack-a"
    assert stored["metadata"]["annotations"]["nodecycle.io/in-progress"] == '{"token":"t"}'
    assert stored["metadata"]["labels"]["node.kubernetes.io/exclude-from-external-load-balancers"] == "true"

    claimed = cluster.get_node(NODE_A)
    assert claimed is not None
    assert cluster.release_node(claimed) is Claim.CLAIMED
    released = server.get_object("nodes", NODE_A)
    assert released is not None
    annotations = released["metadata"].get("annotations") or {}
    assert OWNER_ANNOTATION not in annotations
    assert "nodecycle.io/in-progress" not in annotations


def test_a_claim_on_a_node_changed_since_it_was_read_is_a_conflict(cluster: KubeCluster) -> None:
    stale = cluster.get_node(NODE_A)
    assert stale is not None
    fresh = cluster.claim_node(stale, owner="stack-b", in_progress="{}", cordon=True, exclude_from_lb=False)
    assert fresh is Claim.CLAIMED
    assert (
        cluster.claim_node(stale, owner="stack-a", in_progress="{}", cordon=True, exclude_from_lb=False)
        is Claim.CONFLICT
    )
    node = cluster.get_node(NODE_A)
    assert node is not None
    assert node.owner == "stack-b"


def test_pods_on_lists_one_node_and_classifies_daemonset_pods(
    cluster: KubeCluster, server: KubeServer
) -> None:
    server.reset_counters()
    pods = cluster.pods_on(NODE_A)
    assert server.counters() == {("list", "pods"): 1}
    assert pods
    on_a = {
        pod["metadata"]["name"] for pod in server.objects("pods") if pod["spec"].get("nodeName") == NODE_A
    }
    assert {pod.name for pod in pods} == on_a
    assert {pod.controller_kind for pod in pods} == {"ReplicaSet", "DaemonSet"}


def test_evictions_answer_evicted_then_blocked_by_the_disruption_budget(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given web pods under a budget that allows one unavailable pod, whose replacements are slow to become Ready
    # (in the server's 0.2 s, a second eviction that came later, as under load, was allowed: the first one's
    # replacement was Ready)
    server.pod_start_seconds = 60
    web = [
        pod
        for node in (NODE_A, NODE_B)
        for pod in cluster.pods_on(node)
        if pod.controller_kind == "ReplicaSet"
    ]
    first, second = web[0], web[1]

    # When two are evicted at once, the first goes and the second is refused (429)
    assert cluster.evict(first, grace_seconds=5).kind is Eviction.EVICTED
    blocked = cluster.evict(second, grace_seconds=5)
    assert blocked.kind is Eviction.BLOCKED
    assert blocked.detail.startswith("The disruption budget ")  # the budget named, as the server said

    # And a pod that no longer exists counts as gone
    assert cluster.evict(first.model_copy(update={"name": "web-gone"}), grace_seconds=5).kind is Eviction.GONE


def test_an_eviction_the_api_server_sheds_is_throttled_not_blocked_by_a_budget(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given an API server shedding load (API Priority and Fairness: a 429 in plain text, no Status, no budget)
    web = next(pod for pod in cluster.pods_on(NODE_A) if pod.controller_kind == "ReplicaSet")
    server.faults.arm([Fault("apf", "kube-throttle", target="POST pods/eviction", limit=1, value=3)], seed=1)

    # When the pod is evicted, Then the answer is the server's load, not the pod's budget, with the wait it asked
    # for (Retry-After); and the pod stays
    throttled = EvictionResult(Eviction.THROTTLED, "Too Many Requests", retry_after=3)
    assert cluster.evict(web, grace_seconds=5) == throttled
    assert server.get_object("pods", web.name, web.namespace) is not None


def test_a_pod_replaced_by_one_of_the_same_name_on_another_node_is_neither_evicted_nor_deleted(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a pod of node A as the drain listed it, since deleted and created again under the same name on node
    # B (as a StatefulSet recreates its pods)
    listed = next(pod for pod in cluster.pods_on(NODE_A) if pod.controller_kind == "ReplicaSet")
    admin = CoreV1Api(server.api_client())
    admin.delete_namespaced_pod(listed.name, listed.namespace, grace_period_seconds=0)
    spec = V1PodSpec(node_name=NODE_B, containers=[V1Container(name="app", image="app")])
    admin.create_namespaced_pod(listed.namespace, V1Pod(metadata=V1ObjectMeta(name=listed.name), spec=spec))

    # When the drain evicts, then deletes, the pod it listed, Then neither reaches the new pod (the uid
    # precondition: 409), and both answer that the listed pod is gone
    assert cluster.evict(listed, grace_seconds=5).kind is Eviction.GONE
    assert cluster.delete_pod(listed, grace_seconds=0) is False
    found = server.get_object("pods", listed.name, listed.namespace)
    assert found is not None
    assert found["metadata"]["uid"] != listed.uid
    assert not found["metadata"].get("deletionTimestamp")


def test_a_deleted_pod_is_gone_once_its_grace_period_is_over(
    cluster: KubeCluster, server: KubeServer
) -> None:
    (victim,) = [pod for pod in cluster.pods_on(NODE_A) if pod.controller_kind == "ReplicaSet"][:1]
    assert cluster.delete_pod(victim, grace_seconds=0) is True
    server.settle()
    assert victim.uid not in {pod.uid for pod in cluster.pods_on(NODE_A)}
    assert cluster.delete_pod(victim, grace_seconds=0) is False


@pytest.fixture
def eks(server: KubeServer) -> Iterator[None]:
    with eks_describing(server):
        yield


@pytest.mark.usefixtures("eks")
def test_requests_carry_an_eks_token_the_server_accepts() -> None:
    api = EksCluster("sandbox").api_client()
    token = api.configuration.api_key["authorization"]
    assert token.startswith("k8s-aws-v1.")
    assert "=" not in token
    assert VersionApi(api).get_code().git_version  # 401 without an acceptable token


@pytest.mark.usefixtures("eks")
def test_containers_of_one_cluster_share_one_certificate_file(server: KubeServer) -> None:
    # Given two containers' connections to the same cluster (the sandbox runs many on one machine's /tmp)
    first = EksCluster("sandbox").api_client().configuration.ssl_ca_cert
    second = EksCluster("sandbox").api_client().configuration.ssl_ca_cert

    # Then both use one file, which holds the cluster's certificate (not a new file per container start)
    assert first == second
    assert Path(first).read_bytes() == server.ca_pem


def test_a_node_that_will_come_back_is_released_uncordoned(cluster: KubeCluster, server: KubeServer) -> None:
    node = cluster.get_node(NODE_B)
    assert node is not None
    cluster.claim_node(node, owner="stack-a", in_progress="{}", cordon=True, exclude_from_lb=True)
    claimed = cluster.get_node(NODE_B)
    assert claimed is not None
    assert cluster.release_node(claimed, uncordon=True, unlabel=True) is Claim.CLAIMED
    stored = server.get_object("nodes", NODE_B)
    assert stored is not None
    assert not stored["spec"].get("unschedulable")
    assert "node.kubernetes.io/exclude-from-external-load-balancers" not in (
        stored["metadata"].get("labels") or {}
    )
    assert OWNER_ANNOTATION not in (stored["metadata"].get("annotations") or {})


def test_a_thawed_container_presigns_a_new_token_by_the_wall_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a token presigned at a cold start
    presigned: list[str] = []

    class Sts:
        meta = type("Meta", (), {"events": type("Events", (), {"register": lambda *a, **k: None})()})()

        def generate_presigned_url(self, *args: object, **kwargs: object) -> str:
            presigned.append(f"https://sts.amazonaws.com/?Action=GetCallerIdentity&n={len(presigned)}")
            return presigned[-1]

    tokens = EksTokens("sandbox", sts=Sts())
    first = tokens.token()
    # When the container is frozen for 20 minutes: the monotonic clock stands still, the wall clock does not
    frozen = time.monotonic()
    monkeypatch.setattr(eks_access.time, "monotonic", lambda: frozen)
    thawed = time.time() + 20 * 60
    monkeypatch.setattr(eks_access.time, "time", lambda: thawed)
    # Then the next request gets a new token: EKS refuses one signed 20 minutes ago
    assert tokens.token() != first
    assert len(presigned) == 2


def test_a_token_the_api_server_refuses_is_replaced_and_the_request_sent_once_more() -> None:
    # Given an API server that accepts tokens signed at most a second ago (EKS: 15 minutes)
    with drain_server(SEED, token_max_age_seconds=1) as server, drain_cluster(server) as cluster:
        assert cluster.get_node(NODE_A) is not None
        # When the token has grown too old for the server before the client would renew it
        time.sleep(1.5)
        # Then the 401 is answered with a new token and the same request, once, and it succeeds
        server.reset_counters()
        assert cluster.get_node(NODE_A) is not None
        assert server.counters() == {("get", "nodes"): 1}


def test_a_read_the_api_server_throttles_is_sent_once_and_left_to_the_steps_backoff(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given an API server shedding load (API Priority and Fairness): 429 with Retry-After for node reads, which
    # it raises up to 60 s while the shedding goes on
    server.faults.arm([Fault("apf", "kube-throttle", target="GET nodes", limit=3, value=2)], seed=1)

    # When the drain reads its node, Then the 429 is a transient error at once, from one request: the client
    # does not sleep out Retry-After inside the Lambda and send the read again (three times 60 s outlast the
    # function's timeout); the step's retry backs off instead
    with pytest.raises(TransientError, match="HTTP 429") as throttled:
        cluster.get_node(NODE_A)
    assert [firing.fault for firing in server.faults.firings()] == ["apf"]
    assert throttled.value.retry_after == 2  # (what the step's retry waits at least: see the engine)


def test_a_read_that_outlasts_its_read_timeout_is_not_sent_again_by_the_client(
    cluster: KubeCluster, server: KubeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given node reads served later than the read timeout (a 0.2 s one here; the functions' is 20 s, of a 60 s
    # function, so a read sent four times outlasts the function)
    monkeypatch.setattr(cluster_api, "REQUEST_TIMEOUT", (5, 0.2))
    server.faults.arm([Fault("slow", "kube-slow", target="GET nodes", limit=4, value=0.6)], seed=1)

    # When the drain reads its node, Then the timeout is a transient error after one request
    with pytest.raises(TransientError):
        cluster.get_node(NODE_A)
    assert [firing.fault for firing in server.faults.firings()] == ["slow"]


def test_the_pods_of_a_node_listed_across_a_compaction_are_a_transient_error_then_listed_whole(
    cluster: KubeCluster, server: KubeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the node's pods listed one per page, and once, between the first two pages, a write and a compaction
    # of etcd's history (the list's revision is gone: its continue token expires)
    monkeypatch.setattr(cluster_api, "PAGE", 1)
    api = cluster._api
    list_pods = api.list_pod_for_all_namespaces
    compactions: list[int] = []

    def list_then_compact(**options: Any) -> Any:
        page = list_pods(**options)
        if not compactions:
            CoreV1Api(server.api_client()).patch_node(NODE_B, {"metadata": {"labels": {"written": "since"}}})
            server.compact()
            compactions.append(1)
        return page

    monkeypatch.setattr(api, "list_pod_for_all_namespaces", list_then_compact)

    # When the drain lists the pods, Then the expired list is a transient error (the step's retry lists again)
    with pytest.raises(TransientError, match="HTTP 410"):
        cluster.pods_on(NODE_A)
    # and the list started over has every pod of the node, once
    on_node = sorted(
        p["metadata"]["name"] for p in server.objects("pods") if p["spec"].get("nodeName") == NODE_A
    )
    assert len(on_node) > 1
    assert sorted(pod.name for pod in cluster.pods_on(NODE_A)) == on_node


def test_a_pod_list_rbac_refuses_is_a_refusal_naming_the_call_not_an_error(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given RBAC refusing the list of pods for a while (a ClusterRoleBinding edited and not yet restored)
    server.faults.arm([Fault("rbac", "kube-forbidden", target="GET pods", limit=1)], seed=1)

    # When the pods of a node are listed, Then the adapter answers a refusal in the API server's words, which
    # name the user and the verb: the drain decides on it, as on a refused cordon
    with pytest.raises(Refused, match='cannot list resource "pods"'):
        cluster.pods_on(NODE_A)
    # and once RBAC is back, the list is what it was
    assert {p.name for p in cluster.pods_on(NODE_A)}
