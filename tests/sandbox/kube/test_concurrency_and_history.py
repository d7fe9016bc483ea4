"""Many clients at once, and what tests read back: counters of API calls and the history of writes."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from kubernetes.client.exceptions import ApiException

from nodecycle_sandbox.kube import HistoryEntry, KubeServer, max_unschedulable
from nodecycle_sandbox.kube.controllers import next_wait

from .conftest import Kube, connect, node_name, nodes_seed, pods_of

WRITERS = 20
INCREMENTS = 10


def _increment(server: KubeServer, barrier: threading.Barrier) -> int:
    """Read-modify-replace a counter in the budget ConfigMap INCREMENTS times; returns the conflicts met."""
    kube = connect(server)
    conflicts = 0
    barrier.wait()
    try:
        for _ in range(INCREMENTS):
            while True:
                current = kube.core.read_namespaced_config_map("budget", "default")
                current.data["count"] = str(int(current.data["count"]) + 1)
                try:
                    kube.core.replace_namespaced_config_map("budget", "default", current)
                    break
                except ApiException as error:
                    if error.status != 409:
                        raise
                    conflicts += 1
    finally:
        kube.api_client.close()
    return conflicts


def test_concurrent_read_modify_replace_loses_no_update(server: KubeServer, kube: Kube) -> None:
    # Given a ConfigMap holding a counter
    kube.core.create_namespaced_config_map(
        "default", {"metadata": {"name": "budget"}, "data": {"count": "0"}}
    )
    server.reset_history()
    # When 20 clients each increment it 10 times with optimistic concurrency
    barrier = threading.Barrier(WRITERS)
    started = time.monotonic()
    with ThreadPoolExecutor(WRITERS) as pool:
        conflicts = sum(pool.map(lambda _: _increment(server, barrier), range(WRITERS)))
    elapsed = time.monotonic() - started
    # Then every increment landed exactly once, each write at its own resourceVersion, and quickly
    assert kube.core.read_namespaced_config_map("budget", "default").data["count"] == str(
        WRITERS * INCREMENTS
    )
    writes = [e for e in server.history() if e.resource == "configmaps"]
    assert [e.object["data"]["count"] for e in writes] == [str(n) for n in range(1, WRITERS * INCREMENTS + 1)]
    assert len({e.resource_version for e in writes}) == WRITERS * INCREMENTS
    assert server.counters()[("update", "configmaps")] == WRITERS * INCREMENTS + conflicts
    assert elapsed < 20, f"{WRITERS * INCREMENTS} contended updates took {elapsed:.1f}s"


def test_concurrent_evictions_never_exceed_the_budget(server: KubeServer) -> None:
    # Given 6 pods under maxUnavailable 2, replacements slow to become Ready
    server.seed(
        {
            "nodes": nodes_seed(3),
            "deployments": [
                {"name": "web", "namespace": "shop", "replicas": 6, "pdb": {"maxUnavailable": 2}}
            ],
        }
    )
    server.settle()
    server.pod_start_seconds = 60
    names = [p["metadata"]["name"] for p in pods_of(server, "shop", "web")]
    barrier = threading.Barrier(len(names))

    def evict(name: str) -> int:
        kube = connect(server)
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": "shop"},
        }
        barrier.wait()
        try:
            kube.core.create_namespaced_pod_eviction(name, "shop", body)
            return 201
        except ApiException as error:
            return int(error.status)
        finally:
            kube.api_client.close()

    # When all of them are evicted at the same moment
    with ThreadPoolExecutor(len(names)) as pool:
        statuses = list(pool.map(evict, names))
    # Then exactly two got through
    assert sorted(statuses) == [201, 201, 429, 429, 429, 429]


def test_counters_count_requests_by_verb_and_resource_and_reset(server: KubeServer, kube: Kube) -> None:
    server.seed({"nodes": nodes_seed(1)})
    kube.core.list_node()
    kube.core.read_node(node_name(0, 10))
    kube.core.patch_node(node_name(0, 10), {"spec": {"unschedulable": True}})
    kube.core.list_namespaced_pod("default")
    with pytest.raises(ApiException):
        kube.core.read_namespaced_pod("ghost", "default")  # a 404 is still an API call
    assert server.counters() == {
        ("list", "nodes"): 1,
        ("get", "nodes"): 1,
        ("patch", "nodes"): 1,
        ("list", "pods"): 1,
        ("get", "pods"): 1,
    }
    server.reset_counters()
    assert server.counters() == {}


def test_history_records_who_wrote_what_with_zone_and_cordon_state(server: KubeServer, kube: Kube) -> None:
    server.seed({"nodes": nodes_seed(1)})
    kube.core.patch_node(node_name(0, 10), {"spec": {"unschedulable": True}})

    def the_cordon() -> HistoryEntry:
        # (the API's write: the node lifecycle controller's taint of the cordoned node may follow it)
        return next(e for e in reversed(server.history()) if e.source == "api")

    entry = the_cordon()
    assert (entry.verb, entry.resource, entry.name, entry.source) == (
        "patch",
        "nodes",
        node_name(0, 10),
        "api",
    )
    assert (entry.zone, entry.unschedulable, entry.removed) == ("eu-west-1a", True, False)
    created = next(e for e in server.history() if e.kind == "Node" and e.verb == "create")
    assert (created.source, created.unschedulable) == ("sandbox", False)
    # ...and who asked for it, as kube-apiserver's audit log records each request's user: the authenticated user
    # of an API write, nobody for the sandbox's own
    assert (entry.user, created.user) == ("kubernetes-admin", "")
    # The history hands out copies: changing one changes nothing stored
    entry.object["spec"]["unschedulable"] = False
    assert the_cordon().unschedulable is True


def test_max_unschedulable_reconstructs_concurrent_cordons_per_zone(server: KubeServer, kube: Kube) -> None:
    # Given 6 nodes, 2 per zone
    server.seed({"nodes": nodes_seed(6)})
    a1, a2, b1 = node_name(0, 10), node_name(0, 11), node_name(1, 10)
    cordon = {"spec": {"unschedulable": True}}
    uncordon = {"spec": {"unschedulable": None}}
    # When both zone-a nodes are cordoned together, then zone b's one after they were uncordoned
    kube.core.patch_node(a1, cordon)
    kube.core.patch_node(a2, cordon)
    kube.core.patch_node(a1, uncordon)
    kube.core.patch_node(b1, cordon)
    kube.core.patch_node(a2, uncordon)
    server.remove_node(b1)
    # Then the history shows at most 2 cordoned at once in zone a, 1 in zone b, 2 overall
    history = server.history()
    assert max_unschedulable(history, zone="eu-west-1a") == 2
    assert max_unschedulable(history, zone="eu-west-1b") == 1
    assert max_unschedulable(history, zone="eu-west-1c") == 0
    assert max_unschedulable(history) == 2


def test_objects_are_snapshots_the_caller_cannot_change(server: KubeServer) -> None:
    server.seed({"nodes": nodes_seed(1)})
    node = server.objects("Node")[0]
    node["metadata"]["labels"]["mutated"] = "yes"
    assert "mutated" not in server.objects("nodes")[0]["metadata"]["labels"]
    assert json.dumps(server.objects("no")) == json.dumps(server.objects("nodes"))


def test_the_controller_loop_rests_after_a_long_pass_so_that_requests_get_the_lock() -> None:
    # Given passes of a small cluster (well under a tick) and of a large one (tens of milliseconds)
    tick = 0.05

    # Then after a short pass the loop waits one tick, as before
    assert next_wait(tick, 0.001) == tick

    # And after a long one it rests twice the pass, so that passes hold the store's lock (which every
    # request waits for) a third of the time at most, not back to back
    assert next_wait(tick, 0.06) == pytest.approx(0.12)
    assert 0.06 / (0.06 + next_wait(tick, 0.06)) <= 1 / 3 + 1e-9

    # But never so long that what the controllers do (a node turning Ready) waits seconds at 5,000 nodes
    assert next_wait(tick, 0.6) == pytest.approx(0.15)
