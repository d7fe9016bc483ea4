"""The sandbox's cluster as harsh as a real one where a node fails, each default a real cluster's:

- a container runtime that hangs turns the kubelet's PLEG unhealthy after its relistThreshold (3 min): the kubelet
  posts its node Ready=False (reason KubeletNotReady, "PLEG is not healthy: ..."), the node lifecycle controller
  taints it ``node.kubernetes.io/not-ready`` (NoSchedule and NoExecute) and marks its pods unready, and the taint
  manager deletes them once their toleration is over (300 s by default), where they stay Terminating;
- a node is registered tainted ``node.kubernetes.io/not-ready:NoSchedule`` (kube-apiserver's TaintNodesByCondition
  admission plugin), Ready condition notwithstanding, and keeps it until the node lifecycle controller has seen it
  Ready: nothing that waits for a node to take pods may take the Ready condition alone for it;
- the pod garbage collector force-deletes the pods of a deleted node after its 40 s quarantine, and the pods
  terminating on a NotReady node only once it carries ``node.kubernetes.io/out-of-service`` (whose NoExecute taint
  evicts every pod not tolerating it at once).

Each test names the faster setting it chooses (a threshold, a toleration) rather than waiting minutes."""

from __future__ import annotations

from typing import Any, cast

from kubernetes.client import CoreV1Api, V1Node, V1Pod

from nodecycle_sandbox.kube import KubeServer
from tests.sandbox.kube.conftest import is_ready, node_name, nodes_seed, pods_of, wait_until

SEED = {
    "nodes": nodes_seed(2),
    "deployments": [{"name": "web", "namespace": "shop", "replicas": 2}],
    "daemonSets": [{"name": "agent", "namespace": "shop"}],
}
NODE = node_name(0, 10)
NOT_READY = "node.kubernetes.io/not-ready"
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"


def _ready(server: KubeServer, node: str) -> dict[str, Any]:
    found = server.get_object("nodes", node) or {}
    return next(c for c in found["status"]["conditions"] if c["type"] == "Ready")


def _taints(server: KubeServer, node: str) -> set[tuple[str, str]]:
    found = server.get_object("nodes", node) or {}
    return {(t["key"], t["effect"]) for t in (found.get("spec") or {}).get("taints") or []}


def _web_on(server: KubeServer, node: str) -> dict[str, Any]:
    (pod,) = [p for p in pods_of(server, "shop", "web") if p["spec"].get("nodeName") == node]
    return pod


def _daemon_on(server: KubeServer, node: str) -> list[dict[str, Any]]:
    return [p for p in pods_of(server, "shop", "agent") if p["spec"].get("nodeName") == node]


def test_the_defaults_are_a_real_clusters() -> None:
    server = KubeServer()
    assert server.pleg_threshold_seconds == 180.0  # the kubelet's PLEG relistThreshold
    assert server.pod_gc_quarantine_seconds == 40.0  # podgc's quarantineTime


def test_a_hung_runtime_turns_its_node_not_ready_past_the_pleg_threshold_and_ready_again_once_it_answers() -> (
    None
):
    with KubeServer(tick_seconds=0.02, pod_start_seconds=0.05, pleg_threshold_seconds=0.4) as server:
        server.seed(SEED)
        server.settle()
        web = _web_on(server, NODE)["metadata"]["name"]

        # When the node's container runtime hangs, and a pod is bound to it
        server.hang_runtime(NODE)
        admin = CoreV1Api(server.api_client())
        bound = {
            "metadata": {"name": "late"},
            "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "i"}]},
        }
        admin.create_namespaced_pod("shop", cast("V1Pod", bound))  # (as JSON: sent as it is)

        # Then its kubelet still reports it Ready until the threshold, then Ready=False in its PLEG's words; the pod
        # never starts meanwhile
        assert _ready(server, NODE)["status"] == "True"
        wait_until(lambda: _ready(server, NODE)["status"] == "False", what="the node NotReady")
        ready = _ready(server, NODE)
        assert ready["reason"] == "KubeletNotReady"
        assert ready["message"].startswith("PLEG is not healthy: pleg was last seen active ")
        assert ready["message"].endswith("; threshold is 0.4s")
        # and the node lifecycle controller taints it not-ready and marks its pods unready
        wait_until(lambda: {(NOT_READY, "NoSchedule"), (NOT_READY, "NoExecute")} <= _taints(server, NODE))
        wait_until(lambda: not is_ready(server.get_object("pods", web, "shop") or {}), what="the pod unready")
        assert (server.get_object("pods", "late", "shop") or {})["status"]["phase"] == "Pending"

        # When the runtime answers again, Then the node is Ready, untainted, and its pod ready again
        server.hang_runtime(NODE, hung=False)
        wait_until(lambda: _ready(server, NODE)["status"] == "True", what="the node Ready again")
        wait_until(
            lambda: not {t for t in _taints(server, NODE) if t[0] == NOT_READY}, what="the taints gone"
        )
        wait_until(lambda: is_ready(server.get_object("pods", web, "shop") or {}), what="the pod ready again")
        wait_until(
            lambda: is_ready(server.get_object("pods", "late", "shop") or {}), what="the late pod started"
        )
        admin.api_client.close()


def test_the_pods_of_a_hung_node_are_deleted_past_their_toleration_and_stay_terminating() -> None:
    with KubeServer(
        tick_seconds=0.02,
        pod_start_seconds=0.05,
        pleg_threshold_seconds=0.1,
        unreachable_toleration_seconds=0.3,
    ) as server:
        server.seed(SEED)
        server.settle()
        web = _web_on(server, NODE)["metadata"]["name"]
        (agent,) = _daemon_on(server, NODE)

        # When the node's runtime hangs past the PLEG threshold and the pods' default toleration of not-ready
        server.hang_runtime(NODE)

        # Then the taint manager deletes the Deployment's pod, which stays Terminating (nothing stops it) and is
        # replaced on the other node; the DaemonSet's pod (tolerating not-ready for ever) is left alone
        wait_until(
            lambda: (server.get_object("pods", web, "shop") or {})["metadata"].get("deletionTimestamp"),
            what="the pod deleted by the taint manager",
        )
        wait_until(
            lambda: sum(1 for p in pods_of(server, "shop", "web") if is_ready(p)) == 2, what="a replacement"
        )
        assert server.get_object("pods", web, "shop") is not None
        kept = server.get_object("pods", agent["metadata"]["name"], "shop") or {}
        assert not kept["metadata"].get("deletionTimestamp")


def test_pods_terminating_on_a_not_ready_node_go_only_once_it_is_out_of_service() -> None:
    with KubeServer(tick_seconds=0.02, pod_start_seconds=0.05) as server:
        admin = CoreV1Api(server.api_client())
        server.seed(SEED)
        server.settle()
        web = _web_on(server, NODE)["metadata"]["name"]
        assert len(_daemon_on(server, NODE)) == 1
        # Given the node's kubelet gone (NotReady) and its web pod deleted, Terminating for ever
        server.kill_kubelet(NODE, grace_seconds=0.05)
        wait_until(lambda: _ready(server, NODE)["status"] == "Unknown", what="the node unreachable")
        admin.delete_namespaced_pod(web, "shop")
        server.settle()
        assert (server.get_object("pods", web, "shop") or {})["metadata"].get("deletionTimestamp")

        # When an operator taints it out of service
        taints = (server.get_object("nodes", NODE) or {})["spec"]["taints"]
        out_of_service = {"key": OUT_OF_SERVICE, "value": "nodeshutdown", "effect": "NoExecute"}
        admin.patch_node(NODE, {"spec": {"taints": [*taints, out_of_service]}})

        # Then the pod garbage collector force-deletes the terminating pod, and the taint manager deletes the
        # DaemonSet's pod (it does not tolerate that taint), which is not placed there again
        wait_until(
            lambda: server.get_object("pods", web, "shop") is None, what="the terminating pod collected"
        )
        wait_until(lambda: not _daemon_on(server, NODE), what="the daemon pod gone")
        server.settle()
        assert not _daemon_on(server, NODE)
        admin.api_client.close()


def test_a_node_registers_tainted_not_ready_until_the_node_lifecycle_controller_has_seen_it_ready() -> None:
    # Real: kube-apiserver's TaintNodesByCondition admission plugin (plugin/pkg/admission/nodetaint) adds
    # node.kubernetes.io/not-ready:NoSchedule to every Node created, whatever its status says (a kubelet registers
    # its node with its conditions); the node lifecycle controller's NoSchedule pass lifts it once it sees the node
    # Ready. A node that appears Ready and untainted at once lets a launch gate open, or a pod be scheduled, before
    # the cluster would.
    with KubeServer(tick_seconds=0.02, pod_start_seconds=0.05) as server:
        admin = CoreV1Api(server.api_client())
        ready, joining, posted = node_name(0, 20), node_name(1, 21), node_name(2, 22)

        # Given the controllers held back (the moment between a registration and the controller's answer)
        with server.paused_controllers():
            # When a kubelet registers its node Ready, another its node NotReady, and a client creates a node
            # through the API, Ready in the status it sends
            server.add_node(ready, instance_id="i-0000000000000020", zone="eu-west-1a")
            server.add_node(joining, instance_id="i-0000000000000021", zone="eu-west-1b", ready=False)
            sent = {
                "metadata": {"name": posted},
                "spec": {"providerID": "aws:///eu-west-1c/i-0000000000000022"},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            }
            admin.create_node(cast("V1Node", sent))

            # Then each is stored tainted not-ready (NoSchedule), though it says Ready
            assert _ready(server, ready)["status"] == "True"
            for name in (ready, joining, posted):
                assert _taints(server, name) == {(NOT_READY, "NoSchedule")}, name

        # And once the controller runs, the Ready ones lose it; the one not Ready keeps it (with the NoExecute one)
        wait_until(lambda: not _taints(server, ready), what="the Ready node untainted")
        wait_until(lambda: not _taints(server, posted), what="the created node untainted")
        server.settle()
        assert _taints(server, joining) == {(NOT_READY, "NoSchedule"), (NOT_READY, "NoExecute")}
        # until its kubelet posts Ready
        server.set_node_ready(joining, True)
        wait_until(lambda: not _taints(server, joining), what="the joining node untainted")

        # And a node whose kubelet registers it NotReady and posts Ready as it turns so (a launching instance's):
        # after the pass in which it posts Ready, the node is Ready and still tainted (the controller sees the post
        # from its informer, after it); the next pass lifts the taint
        booting = node_name(0, 23)
        with server.paused_controllers():
            server.add_node(booting, instance_id="i-0000000000000023", zone="eu-west-1a", ready_after=0.0)
            server.pass_controllers()
            assert _ready(server, booting)["status"] == "True"
            assert (NOT_READY, "NoSchedule") in _taints(server, booting)
            server.pass_controllers()
            assert not _taints(server, booting)
        admin.api_client.close()
