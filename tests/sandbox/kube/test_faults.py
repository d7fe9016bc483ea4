"""The API server failing as a busy or broken kube-apiserver does, when a test arms faults: conflicts on
versioned writes, throttling with Retry-After, server errors, slow answers, dropped connections."""

from __future__ import annotations

import time

import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer

from .conftest import Kube, connect, node_name, nodes_seed, pods_of, status_of


def _node_version(kube: Kube) -> str:
    return str(kube.core.read_node(node_name(0, 10)).metadata.resource_version)


def test_faults_are_off_until_armed(server: KubeServer, kube: Kube) -> None:
    # Given a server whose faults were never armed
    server.seed({"nodes": nodes_seed(1)})

    # When a versioned write is made, Then it succeeds and nothing was injected
    body = {"metadata": {"resourceVersion": _node_version(kube), "labels": {"a": "b"}}}
    kube.core.patch_node(node_name(0, 10), body)
    assert server.faults.counts() == {}


def test_a_conflict_storm_refuses_versioned_writes_only_and_writes_nothing(
    server: KubeServer, kube: Kube
) -> None:
    # Given a 409 storm on node writes
    server.seed({"nodes": nodes_seed(1)})
    server.faults.arm([Fault("f1", "kube-conflict", target="PATCH nodes")], seed=1)

    # When a versioned patch is made, Then it gets the Conflict status a concurrent writer would cause
    version = _node_version(kube)
    with pytest.raises(ApiException) as refused:
        kube.core.patch_node(
            node_name(0, 10), {"metadata": {"resourceVersion": version, "labels": {"a": "b"}}}
        )
    assert refused.value.status == 409
    assert status_of(refused.value)["reason"] == "Conflict"
    assert _node_version(kube) == version
    # ...while an unversioned patch and a read go through
    kube.core.patch_node(node_name(0, 10), {"metadata": {"labels": {"c": "d"}}})
    assert server.faults.counts() == {"kube-conflict": 1}


def test_throttling_answers_429_with_retry_after(server: KubeServer, kube: Kube) -> None:
    # Given throttling of configmap creations once, and of pod lists twice
    server.faults.arm(
        [
            Fault("f1", "kube-throttle", target="POST configmaps", limit=1, value=1),
            Fault("f2", "kube-throttle", target="GET pods", limit=2, value=1),
        ],
        seed=1,
    )

    # When a configmap is created, Then the client gets the 429 with its Retry-After, and the text that
    # kube-apiserver's priority and fairness filter writes (no Status: no API handler was reached)
    with pytest.raises(ApiException) as refused:
        kube.core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}})
    assert refused.value.status == 429
    assert (refused.value.headers or {})["Retry-After"] == "1"
    assert (refused.value.headers or {})["Content-Type"].startswith("text/plain")
    assert refused.value.body == "Too many requests, please try again later.\n"

    # When pods are listed, Then the official client (urllib3) honours Retry-After on a GET: it waits,
    # retries, and gets the list on its third try
    started = time.monotonic()
    kube.core.list_pod_for_all_namespaces()
    assert time.monotonic() - started >= 2
    assert [f.fault for f in server.faults.firings()] == ["f1", "f2", "f2"]


@pytest.mark.parametrize("target", ["GET configmaps", "PUT configmaps", "GET nodes", "PATCH nodes"])
def test_throttling_refuses_any_verb_before_doing_anything(server: KubeServer, target: str) -> None:
    # Given a ConfigMap and a node, and every request of one kind shed by API Priority and Fairness (which
    # judges a request before any handler, whatever its verb: a read or list as much as a write or an eviction)
    server.seed({"nodes": nodes_seed(1)})
    kube = connect(server)
    kube.api_client.rest_client.pool_manager.connection_pool_kw["retries"] = (
        False  # (each answer as it comes)
    )
    kube.core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}, "data": {"k": "v"}})
    version = str(kube.core.read_namespaced_config_map("cm", "default").metadata.resource_version)
    server.faults.arm([Fault("apf", "kube-throttle", target=target, value=3)], seed=1)
    calls = {
        "GET configmaps": lambda: kube.core.read_namespaced_config_map("cm", "default"),
        "PUT configmaps": lambda: kube.core.replace_namespaced_config_map(
            "cm", "default", {"metadata": {"name": "cm", "resourceVersion": version}, "data": {"k": "w"}}
        ),
        "GET nodes": lambda: kube.core.list_node(),
        "PATCH nodes": lambda: kube.core.patch_node(node_name(0, 10), {"metadata": {"labels": {"a": "b"}}}),
    }

    # When the request is made, Then it is answered 429 with its Retry-After, and nothing was done
    with pytest.raises(ApiException) as refused:
        calls[target]()
    assert (refused.value.status, (refused.value.headers or {}).get("Retry-After")) == (429, "3")
    server.faults.disarm()
    assert kube.core.read_namespaced_config_map("cm", "default").data == {"k": "v"}
    assert "a" not in (kube.core.read_node(node_name(0, 10)).metadata.labels or {})
    kube.api_client.close()


def test_a_lost_response_still_applies_the_write(server: KubeServer, kube: Kube) -> None:
    # Given responses to node patches lost once
    server.seed({"nodes": nodes_seed(1)})
    server.faults.arm([Fault("f1", "kube-lost-response", target="PATCH nodes", limit=1)], seed=1)

    # When a node is labelled, Then the client sees the connection fail, but the label is there
    with pytest.raises(HTTPError):
        kube.core.patch_node(node_name(0, 10), {"metadata": {"labels": {"lost": "yes"}}})
    node = server.get_object("nodes", node_name(0, 10))
    assert node is not None
    assert node["metadata"]["labels"]["lost"] == "yes"


def test_a_slow_answer_comes_late_and_a_dropped_request_does_nothing(server: KubeServer, kube: Kube) -> None:
    # Given one slow read, then one dropped create
    server.faults.arm(
        [
            Fault("slow", "kube-slow", target="GET namespaces", limit=1, value=0.5),
            Fault("drop", "kube-drop", target="POST configmaps", limit=1),
        ],
        seed=1,
    )

    # When both are made
    started = time.monotonic()
    kube.core.list_namespace()
    took = time.monotonic() - started
    with pytest.raises(HTTPError):
        kube.core.create_namespaced_config_map("default", {"metadata": {"name": "never"}})

    # Then the read took the delay, and the dropped create created nothing
    assert took >= 0.5
    assert server.get_object("configmaps", "never", "default") is None
    assert server.faults.counts() == {"kube-slow": 1, "kube-drop": 1}


def test_the_same_seed_draws_the_same_faults(server: KubeServer, kube: Kube) -> None:
    # Given server errors on half the namespace lists
    plan = [Fault("f1", "kube-error", target="GET namespaces", probability=0.5)]

    def outcomes(seed: int) -> list[int]:
        server.faults.arm(plan, seed=seed)
        found = []
        for _ in range(20):
            try:
                kube.core.list_namespace()
                found.append(200)
            except ApiException as error:
                found.append(error.status)
        return found

    # When the same sequence of requests is made twice with one seed, and once with another
    first, again, other = outcomes(7), outcomes(7), outcomes(8)

    # Then the same seed gave the same answers, and some of them were 500s
    assert first == again
    assert 500 in first
    assert first != other


def test_a_webhook_that_is_down_refuses_writes_only_and_nothing_is_done(
    server: KubeServer, kube: Kube
) -> None:
    # Given a pod, and a failing-closed webhook on evictions that is down (twice at most)
    server.seed(
        {"nodes": nodes_seed(1), "deployments": [{"name": "web", "namespace": "shop", "replicas": 1}]}
    )
    server.settle()
    (name,) = [p["metadata"]["name"] for p in pods_of(server, "shop", "web")]
    server.faults.arm([Fault("f1", "kube-webhook-down", target="* pods/eviction", limit=2)], seed=1)
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}

    # When the pods are read and the pod is evicted
    kube.core.list_namespaced_pod("shop")
    with pytest.raises(ApiException) as refused:
        kube.core.create_namespaced_pod_eviction(name, "shop", eviction)

    # Then the read passed (admission judges writes only), and the eviction got the 500 kube-apiserver sends
    # when it cannot call a webhook whose failurePolicy is Fail; the pod was not touched
    assert refused.value.status == 500
    status = status_of(refused.value)
    assert status["reason"] == "InternalError"
    assert status["message"].startswith('Internal error occurred: failed calling webhook "')
    assert kube.core.read_namespaced_pod(name, "shop").metadata.deletion_timestamp is None
    assert server.faults.counts() == {"kube-webhook-down": 1}


def test_a_policy_webhook_denies_a_cordon_in_its_own_words(server: KubeServer, kube: Kube) -> None:
    # Given a policy engine that denies node patches
    server.seed({"nodes": nodes_seed(1)})
    # (seed 6: the fault's dice draw the webhook's 403 of today's kube-apiserver, of the three answers it gives)
    server.faults.arm([Fault("f1", "kube-webhook-deny", target="PATCH nodes", limit=1)], seed=6)

    # When the node is cordoned
    with pytest.raises(ApiException) as refused:
        kube.core.patch_node(node_name(0, 10), {"spec": {"unschedulable": True}})

    # Then the webhook's 403 came back as kube-apiserver words it, and the node is not cordoned
    assert refused.value.status == 403
    assert status_of(refused.value)["reason"] == "Forbidden"
    assert 'admission webhook "' in status_of(refused.value)["message"]
    assert "denied the request" in status_of(refused.value)["message"]
    assert not kube.core.read_node(node_name(0, 10)).spec.unschedulable


def _webhook_denials(server: KubeServer, kube: Kube, seed: int, count: int) -> list[tuple[int, str, str]]:
    server.faults.arm([Fault("f1", "kube-webhook-deny", target="PATCH nodes")], seed=seed)
    answers = []
    for _ in range(count):
        with pytest.raises(ApiException) as refused:
            kube.core.patch_node(node_name(0, 10), {"spec": {"unschedulable": True}})
        status = status_of(refused.value)
        assert refused.value.status == status["code"]
        answers.append((status["code"], status.get("reason", ""), status["message"]))
    server.faults.disarm()
    return answers


def test_admission_denies_in_each_of_the_answers_a_real_cluster_gives(server: KubeServer, kube: Kube) -> None:
    # Given admission that denies every node patch
    server.seed({"nodes": nodes_seed(1)})
    node = node_name(0, 10)

    # When the node is cordoned again and again, under two runs of the same seed
    answers = _webhook_denials(server, kube, seed=7, count=24)
    again = _webhook_denials(server, kube, seed=7, count=24)

    # Then each answer is one kube-apiserver gives: a webhook's deny as ToStatusErr words it today (403, reason
    # Forbidden, NewForbidden's prefix), one without a code on an older kube-apiserver (raised to 400, no reason), a
    # ValidatingAdmissionPolicy's (422 Invalid, reasonToCode's for a policy that gives no reason); all three come,
    # drawn on the fault's seeded dice (the same seed, the same answers); the node is never cordoned
    explanation = f"nodes of {node} is not allowed now"
    webhook = 'admission webhook "policy.chaos.nodecycle.io" denied the request'
    policy = "ValidatingAdmissionPolicy 'chaos.nodecycle.io' with binding 'chaos.nodecycle.io-binding' denied request"
    assert set(answers) == {
        (403, "Forbidden", f'nodes "{node}" is forbidden: {webhook}: {explanation}'),
        (400, "", f"{webhook}: {explanation}"),
        (422, "Invalid", f'nodes "{node}" is forbidden: {policy}: {explanation}'),
    }
    assert again == answers
    assert not kube.core.read_node(node).spec.unschedulable


def test_rbac_refuses_a_verb_for_a_while_as_the_authorizer_words_it(server: KubeServer, kube: Kube) -> None:
    # Given the permission to patch nodes withdrawn for one request
    server.seed({"nodes": nodes_seed(1)})
    server.faults.arm([Fault("f1", "kube-forbidden", target="PATCH nodes", limit=1)], seed=1)
    patch = {"metadata": {"labels": {"a": "b"}}}

    # When the node is patched twice
    with pytest.raises(ApiException) as refused:
        kube.core.patch_node(node_name(0, 10), patch)
    kube.core.patch_node(node_name(0, 10), {"metadata": {"labels": {"c": "d"}}})

    # Then the first got RBAC's 403 naming the user, the verb and the node, and was not applied; the second was
    assert refused.value.status == 403
    status = status_of(refused.value)
    assert status["reason"] == "Forbidden"
    assert status["message"] == (
        f'nodes "{node_name(0, 10)}" is forbidden: User "kubernetes-admin" cannot patch resource "nodes" in '
        'API group "" at the cluster scope'
    )
    assert kube.core.read_node(node_name(0, 10)).metadata.labels.get("a") is None
    assert kube.core.read_node(node_name(0, 10)).metadata.labels["c"] == "d"


def _read_node_once(kube: Kube, server: KubeServer, timeout: float = 5.0) -> int:
    """One GET of the node, not sent again by the client whatever befalls it; its status."""
    headers = {"Authorization": f"Bearer {server.token()}"}
    url = f"{server.url}/api/v1/nodes/{node_name(0, 10)}"
    pool = kube.api_client.rest_client.pool_manager
    response = pool.request("GET", url, headers=headers, retries=False, timeout=timeout)
    return int(response.status)


@pytest.mark.parametrize("how", ["reset", "blackhole"])
def test_a_flow_the_load_balancer_forgot_fails_the_next_request_unserved(
    server: KubeServer, kube: Kube, how: str
) -> None:
    # Given a client whose pooled connection went idle past the load balancer's idle timeout (no FIN: the client's
    # check before reuse finds it open)
    server.seed({"nodes": nodes_seed(1)})
    assert _read_node_once(kube, server) == 200
    opened = server.connections_opened()
    assert server.drop_idle_flows(how) == 1
    server.reset_counters()

    # When it sends its next request on it, Then it meets a reset, or no answer until its read timeout
    with pytest.raises(HTTPError):
        _read_node_once(kube, server, timeout=1.0)
    # ...and the API server never saw it; a new connection is served
    assert server.counters() == {}
    assert _read_node_once(kube, server) == 200
    assert server.connections_opened() == opened + 1
    with pytest.raises(ValueError, match="reset, blackhole"):
        server.drop_idle_flows("close")


def test_an_answer_cut_half_way_gives_its_status_then_fails_its_body(server: KubeServer, kube: Kube) -> None:
    # Given answers to node reads cut half-way through their bodies
    server.seed({"nodes": nodes_seed(1)})
    server.faults.arm([Fault("cut", "kube-cut-answer", target="GET nodes")], seed=1)

    # When a node is read, Then its status came, and its body fails half-way (the read was served all the same)
    headers = {"Authorization": f"Bearer {server.token()}"}
    url = f"{server.url}/api/v1/nodes/{node_name(0, 10)}"
    pool = kube.api_client.rest_client.pool_manager
    response = pool.request("GET", url, headers=headers, retries=False, preload_content=False)
    assert response.status == 200
    with pytest.raises(HTTPError, match="IncompleteRead"):
        response.read()
    assert server.counters() == {("get", "nodes"): 1}


def test_a_connection_idle_past_the_load_balancers_timeout_is_reset_at_its_next_request() -> None:
    # Given a load balancer whose idle timeout is a second, and a client's connection idle longer than that
    with KubeServer(tick_seconds=0.02, flow_idle_timeout_seconds=1.0) as server:
        server.seed({"nodes": nodes_seed(1)})
        kube = connect(server)
        assert _read_node_once(kube, server) == 200
        time.sleep(2.0)

        # When the client sends its next request on it, Then it meets a reset, unserved
        server.reset_counters()
        with pytest.raises(HTTPError):
            _read_node_once(kube, server)
        assert server.counters() == {}
        kube.api_client.close()
