"""The campaign's "pdb" invariant judged on what the sandbox's API server records when an instance is
terminated with its pods still running (a drain that timed out with its cordon refused: nothing evicted).

Its kubelet goes with it: the node lifecycle controller turns the node Unknown after its monitor grace and
marks its pods NotReady, and the disruption controller counts them unhealthy. That is seconds before the
cloud provider deletes the node and, after the pod GC's quarantine, its pods. No PodDisruptionBudget can
stop any of it, and no eviction took part (seed 42 scenario 9 of a campaign on a loaded machine).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from nodecycle_sandbox.aws.records import TERMINATING, ActionRecord, InstanceHistory
from nodecycle_sandbox.chaos import invariants
from nodecycle_sandbox.chaos.invariants import check
from nodecycle_sandbox.chaos.plan import draw
from nodecycle_sandbox.chaos.world import Observation
from nodecycle_sandbox.checks import Breach, pdb_breaches
from nodecycle_sandbox.kube import HistoryEntry, KubeServer
from tests.sandbox.kube.conftest import connect, is_ready, node_name, nodes_seed, pods_of, wait_until

INSTANCE = "i-00000000000000000"  # nodes_seed's first node
# The drain timeout the judge is given where a test deletes pods past it (the campaign's is 20 s)
SHORT_DRAIN_TIMEOUT = 1.0


def _terminate(started: float, finished: float) -> ActionRecord:
    return ActionRecord(
        token="tok",
        group="g",
        hook="nodecycle-terminate",
        instance_id=INSTANCE,
        transition=TERMINATING,
        default_result="CONTINUE",
        heartbeat_timeout=30,
        global_timeout=180,
        started_at=started,
        finished_at=finished,
        result="CONTINUE",
        outcome="completed",
    )


def _observation(
    history: list[HistoryEntry], acting: float, instance: InstanceHistory, **more: Any
) -> Observation:
    values: dict[str, Any] = {
        "scenario": draw(42, 9, faults=False),
        "groups": {"g": "chaos-b"},
        "started_at": acting,
        "acting_at": acting,
        "quiescent": True,
        "left_over": [],
        "actions": [_terminate(acting, instance.terminated_at or acting)],
        "instances": [instance],
        "history": history,
        "addresses": [],
        "final_addresses": {},
        # the drain timed out with its cordon refused: the "drain" invariant lets its pods go with it
        "outcomes": {"tok": "drain-timeout-cordon-refused"},
        "lost_kubelet": None,
        "firings": [],
    }
    return Observation(**{**values, **more})


def _healthy(server: KubeServer) -> int:
    pdb = server.get_object("poddisruptionbudgets", "web", "shop") or {}
    return int((pdb.get("status") or {}).get("currentHealthy", -1))


def _terminated_with_its_pods_running(
    *, quarantine: float
) -> tuple[list[HistoryEntry], float, InstanceHistory]:
    """Five pods of ``web`` under maxUnavailable 2 (3 required) on two nodes, three on the first (as when the
    replacements of another node's evictions land on a node whose cordon was refused); then that node's
    instance is terminated without a drain, its node removed once its pods were marked NotReady."""
    with KubeServer(
        tick_seconds=0.02,
        pod_start_seconds=0.05,
        node_monitor_grace_seconds=0.3,
        pod_gc_quarantine_seconds=quarantine,
    ) as server:
        server.seed(
            {
                "nodes": nodes_seed(2),
                "deployments": [
                    {"name": "web", "namespace": "shop", "replicas": 5, "pdb": {"maxUnavailable": 2}}
                ],
            }
        )
        server.settle()
        wait_until(lambda: _healthy(server) == 5, what="5 healthy pods")
        node = node_name(0, 10)
        on_node = [p for p in pods_of(server, "shop", "web") if p["spec"]["nodeName"] == node]
        assert len(on_node) == 3
        assert all(is_ready(p) for p in on_node)
        acting = time.time()
        time.sleep(0.01)

        server.instance_terminated(node)
        terminated = time.time()
        wait_until(lambda: _healthy(server) == 2, what="the budget to count the node's pods unhealthy")
        server.remove_node(node)
        wait_until(
            lambda: not [p for p in pods_of(server, "shop", "web") if p["spec"].get("nodeName") == node],
            timeout=10,
            what="the pod GC",
        )
        wait_until(lambda: _healthy(server) == 5, timeout=10, what="the replacements")
        instance = InstanceHistory(
            INSTANCE, "g", "eu-west-1a", node, acting - 60, acting - 50, acting + 0.005, terminated
        )
        return server.history(), acting, instance


def _breaches_after(history: list[HistoryEntry], acting: float) -> list[Breach]:
    return [b for b in pdb_breaches(history) if b.time >= acting]


def test_pods_that_turn_unready_with_their_terminated_instance_are_no_breach_an_eviction_made() -> None:
    history, acting, instance = _terminated_with_its_pods_running(quarantine=0.5)
    # (the budget's status did fall below its floor: 2 healthy pods, 3 required, before any pod was removed)
    breaches = _breaches_after(history, acting)
    assert [(b.healthy, b.desired) for b in breaches[:1]] == [(2, 3)]
    first_removed = min(e.time for e in history if e.kind == "Pod" and e.removed and e.time >= acting)
    assert breaches[0].time < first_removed
    assert not [e for e in history if e.resource == "pods/eviction"]

    judged = check(_observation(history, acting, instance))

    assert [v for v in judged if v.invariant == "pdb"] == []


def test_a_breach_before_the_instance_ended_is_still_a_violation() -> None:
    history, acting, instance = _terminated_with_its_pods_running(quarantine=0.5)
    # Given the same world, where the instance is recorded as ended only after the budget fell below its floor
    # (the pods turned unready through something else, before anything excused it)
    after = max(e.time for e in history) + 1
    late = InstanceHistory(
        instance.instance_id,
        instance.group,
        instance.zone,
        instance.node_name,
        acting - 60,
        acting - 50,
        after,
        after,
    )

    judged = check(_observation(history, acting, late))

    assert [v.detail for v in judged if v.invariant == "pdb"] == [
        f"shop/web: 2 healthy pods, 3 required ({_breaches_after(history, acting)[0].time - acting:.1f}s in)"
    ]


def _breach_after(history: list[HistoryEntry]) -> HistoryEntry:
    """The budget's status below its floor one second after everything recorded: what an eviction past it
    would leave (the sandbox refuses one, as kube-apiserver does; a product that deleted pods instead)."""
    (pdb,) = [e for e in history if e.kind == "PodDisruptionBudget" and not e.removed][-1:]
    status = {**pdb.object["status"], "currentHealthy": 1, "desiredHealthy": 2}
    last = history[-1]
    return HistoryEntry(
        last.resource_version + 1,
        last.time + 1,
        "update",
        "poddisruptionbudgets/status",
        pdb.namespace,
        pdb.name,
        "sandbox",
        False,
        {**pdb.object, "status": status},
    )


def test_a_daemonset_pod_gone_with_its_drained_node_excuses_no_later_breach() -> None:
    with KubeServer(tick_seconds=0.02, pod_start_seconds=0.05, pod_gc_quarantine_seconds=0) as server:
        kube = connect(server)
        # Given web (2 replicas, minAvailable 1) and a DaemonSet on two nodes
        server.seed(
            {
                "nodes": nodes_seed(2),
                "deployments": [
                    {"name": "web", "namespace": "shop", "replicas": 2, "pdb": {"minAvailable": 1}}
                ],
                "daemonSets": [{"name": "agent", "namespace": "shop"}],
            }
        )
        server.settle()
        wait_until(lambda: _healthy(server) == 2, what="2 healthy pods")
        acting = time.time()
        time.sleep(0.01)
        # When the second node is drained through the Eviction API (its web pod goes, replaced on the first),
        # and the node is deleted with its DaemonSet pod still running (removed at once by podgc: quarantine 0)
        drained = node_name(1, 10)
        kube.core.patch_node(drained, {"spec": {"unschedulable": True}})
        (web,) = [p for p in pods_of(server, "shop", "web") if p["spec"]["nodeName"] == drained]
        kube.core.create_namespaced_pod_eviction(web["metadata"]["name"], "shop", _eviction(web))
        wait_until(
            lambda: _healthy(server) == 2 and len(pods_of(server, "shop", "web")) == 2, what="replaced"
        )
        assert server.remove_node(drained)
        wait_until(lambda: not pods_of(server, "shop", "agent")[1:], what="the agent pod collected")
        history = server.history()
        kube.api_client.close()
    removed = {e.name.split("-")[0] for e in history if e.kind == "Pod" and e.removed and e.verb == "delete"}
    assert "agent" in removed

    # Then a breach after all this is still judged one: none of it is something a budget could not stop
    breached = [*history, _breach_after(history)]
    judged = check(_observation(breached, acting, _no_instance(), outcomes={}, actions=[]))

    assert [v.invariant for v in judged if v.invariant == "pdb"] == ["pdb"]


def _no_instance() -> InstanceHistory:
    return InstanceHistory(INSTANCE, "g", "eu-west-1a", "no-such-node", 0.0)


def _eviction(pod: dict[str, Any]) -> dict[str, Any]:
    meta = pod["metadata"]
    return {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": meta["name"], "namespace": "shop"},
    }


def _pods_deleted_through_the_api(*, after: float) -> tuple[list[HistoryEntry], float, InstanceHistory]:
    """web (4 replicas, minAvailable 3) on two nodes, two pods on each; the first node is cordoned (its drain
    begins), and ``after`` seconds later its two pods are deleted through the API (DELETE pods, as the force
    policy does, and as a drain that deleted instead of evicting would): no budget is asked, and it falls to 2
    healthy pods until their replacements are Ready on the other node."""
    with KubeServer(tick_seconds=0.02, pod_start_seconds=0.3) as server:
        kube = connect(server)
        server.seed(
            {
                "nodes": nodes_seed(2),
                "deployments": [
                    {"name": "web", "namespace": "shop", "replicas": 4, "pdb": {"minAvailable": 3}}
                ],
            }
        )
        server.settle()
        wait_until(lambda: _healthy(server) == 4, what="4 healthy pods")
        node = node_name(0, 10)
        on_node = [p for p in pods_of(server, "shop", "web") if p["spec"]["nodeName"] == node]
        assert len(on_node) == 2
        acting = time.time()
        time.sleep(0.01)
        kube.core.patch_node(node, {"spec": {"unschedulable": True}})
        time.sleep(after)
        # (both deletes before the controllers' next pass: the first one's replacement is Ready 0.3 s after it,
        # and a second delete that came later, as under load, left web at 3 healthy pods, no breach)
        with server.paused_controllers():
            for pod in on_node:
                kube.core.delete_namespaced_pod(pod["metadata"]["name"], "shop", grace_period_seconds=1)
        names = {p["metadata"]["name"] for p in on_node}
        wait_until(
            lambda: not names & {p["metadata"]["name"] for p in pods_of(server, "shop", "web")},
            timeout=10,
            what="the deleted pods gone",
        )
        wait_until(lambda: _healthy(server) == 4, timeout=10, what="the replacements")
        history = server.history()
        kube.api_client.close()
    instance = InstanceHistory(INSTANCE, "g", "eu-west-1a", node, acting - 60, acting - 50, acting + 0.005)
    deleted = [e for e in history if e.kind == "Pod" and e.verb == "delete" and e.source == "api"]
    assert {e.name for e in deleted} == {p["metadata"]["name"] for p in on_node}
    assert [(b.healthy, b.desired) for b in _breaches_after(history, acting)[:1]] == [(2, 3)]
    return history, acting, instance


def _judged_pdb(history: list[HistoryEntry], acting: float, instance: InstanceHistory) -> list[str]:
    # (the instance is still there: only the drain's deletes can have taken web below its floor)
    action = _terminate(acting, history[-1].time)
    judged = check(_observation(history, acting, instance, actions=[action], outcomes={"tok": "drained"}))
    return [v.detail for v in judged if v.invariant == "pdb"]


def test_pods_deleted_before_the_drain_timeout_are_a_breach() -> None:
    # Given a drain that deleted its pods through the API as soon as it cordoned the node: no eviction, the
    # force policy's delete long before the drain timeout (or a drain that deletes instead of evicting)
    history, acting, instance = _pods_deleted_through_the_api(after=0.2)

    # Then the breach it made is judged one: the delete excuses nothing
    assert _judged_pdb(history, acting, instance) == [
        f"shop/web: 2 healthy pods, 3 required ({_breaches_after(history, acting)[0].time - acting:.1f}s in)"
    ]


def test_pods_force_deleted_once_the_drain_timed_out_are_no_breach_an_eviction_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given the judge's drain timeout made short: what is judged is the order of the cordon, the timeout and the
    # deletes, not the campaign's 20 s (which were 20 s of sleep here)
    monkeypatch.setattr(invariants, "DRAIN_TIMEOUT", SHORT_DRAIN_TIMEOUT)
    # and a drain whose pods were deleted through the API once its timeout was over since its cordon (the force
    # policy, which the operator chose over the budget)
    history, acting, instance = _pods_deleted_through_the_api(after=SHORT_DRAIN_TIMEOUT + 0.5)

    # Then the breach the deletes made is excused
    assert _judged_pdb(history, acting, instance) == []


def test_pods_that_turn_unready_with_a_hung_runtimes_node_are_no_breach_an_eviction_made() -> None:
    # A kubelet whose container runtime hangs posts its node Ready=False once its PLEG has not relisted for the
    # threshold ("PLEG is not healthy"); the node lifecycle controller then marks the node's pods NotReady
    # (MarkPodsNotReady runs for a Ready condition that turned False, as for one turned Unknown) and the disruption
    # controller counts them unhealthy. No PodDisruptionBudget can stop it, and no eviction takes part (seed 91
    # scenario 3: a node waiting for its slot turned NotReady while two drained nodes' replacements started,
    # web fell to 2 healthy pods of 3 required, and the judge called it an eviction's breach).
    with KubeServer(tick_seconds=0.02, pod_start_seconds=0.05, pleg_threshold_seconds=0.3) as server:
        # Given five pods of web under maxUnavailable 2 (3 required), three of them on the first node
        server.seed(
            {
                "nodes": nodes_seed(2),
                "deployments": [
                    {"name": "web", "namespace": "shop", "replicas": 5, "pdb": {"maxUnavailable": 2}}
                ],
            }
        )
        server.settle()
        wait_until(lambda: _healthy(server) == 5, what="5 healthy pods")
        node = node_name(0, 10)
        assert len([p for p in pods_of(server, "shop", "web") if p["spec"]["nodeName"] == node]) == 3
        acting = time.time()
        time.sleep(0.01)
        # When that node's container runtime hangs, and its kubelet posts it NotReady after the threshold
        server.hang_runtime(node)
        wait_until(lambda: _healthy(server) == 2, what="the budget to count the node's pods unhealthy")
        history = server.history()
        server.hang_runtime(node, hung=False)
    assert [(b.healthy, b.desired) for b in _breaches_after(history, acting)[:1]] == [(2, 3)]
    assert not [e for e in history if e.resource == "pods/eviction" or (e.kind == "Pod" and e.removed)]
    # (its instance still in service, not terminating: nothing of nodecycle's took part)
    instance = InstanceHistory(INSTANCE, "g", "eu-west-1a", node, acting - 60, acting - 50)

    judged = check(_observation(history, acting, instance, actions=[], outcomes={}))

    # Then the breach is the cluster's, not an eviction's
    assert [v.detail for v in judged if v.invariant == "pdb"] == []


def test_a_breach_before_a_hung_runtimes_node_turned_not_ready_is_still_a_violation() -> None:
    with KubeServer(tick_seconds=0.02, pod_start_seconds=0.05, pleg_threshold_seconds=0.3) as server:
        server.seed(
            {
                "nodes": nodes_seed(2),
                "deployments": [
                    {"name": "web", "namespace": "shop", "replicas": 5, "pdb": {"maxUnavailable": 2}}
                ],
            }
        )
        server.settle()
        wait_until(lambda: _healthy(server) == 5, what="5 healthy pods")
        node = node_name(0, 10)
        acting = time.time()
        time.sleep(0.01)
        # Given a node whose runtime hangs but whose kubelet has not posted it NotReady yet (a long threshold)
        server.pleg_threshold_seconds = 3600.0
        server.hang_runtime(node)
        history = server.history()
        server.hang_runtime(node, hung=False)
    # When the budget falls below its floor by something else (what a drain that deleted pods would leave)
    breached = [*history, _breach_after(history)]
    instance = InstanceHistory(INSTANCE, "g", "eu-west-1a", node, acting - 60, acting - 50)

    judged = check(_observation(breached, acting, instance, actions=[], outcomes={}))

    # Then it is judged a breach: a hung runtime excuses only from its node's NotReady
    assert [v.invariant for v in judged if v.invariant == "pdb"] == ["pdb"]
