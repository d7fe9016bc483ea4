"""Deletions a real cluster does not finish at once: objects with finalizers, and pods of a node whose kubelet
is gone (NotReady, their graceful deletions never complete until a force delete or the node's removal); the
Lease of a kubelet, renewed while it runs, left as it was once it is gone."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from nodecycle_sandbox.kube import SHUTDOWN_ANNOTATION, KubeServer
from nodecycle_sandbox.kube.meta import parse_rfc3339

from .conftest import Kube, connect, is_ready, node_name, nodes_seed, status_of, wait_until

FINALIZER = "example.com/keep"


def _pod(
    name: str, node: str, *, finalizers: list[str] | None = None, shutdown: float = 0.1
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "annotations": {SHUTDOWN_ANNOTATION: str(shutdown)}}
    if finalizers:
        metadata["finalizers"] = finalizers
    return {"metadata": metadata, "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}}


def _running(server: KubeServer, name: str) -> None:
    wait_until(
        lambda: (pod := server.get_object("pods", name, "default")) is not None and is_ready(pod),
        what=f"{name} Ready",
    )


def _ready_status(server: KubeServer, node: str) -> str:
    found = server.get_object("nodes", node)
    assert found is not None
    return next(c["status"] for c in found["status"]["conditions"] if c["type"] == "Ready")


def test_a_pod_with_a_finalizer_stays_terminating_after_its_shutdown_until_the_finalizer_is_removed(
    server: KubeServer, kube: Kube
) -> None:
    # Given a running pod with a finalizer, which stops in 0.1 s
    server.seed({"nodes": nodes_seed(1)})
    kube.core.create_namespaced_pod("default", _pod("kept", node_name(0, 10), finalizers=[FINALIZER]))
    _running(server, "kept")

    # When it is deleted gracefully, and its shutdown is long over
    kube.core.delete_namespaced_pod("kept", "default")
    wait_until(
        lambda: (
            (server.get_object("pods", "kept", "default") or {})["metadata"].get("deletionGracePeriodSeconds")
            == 0
        ),
        what="the kubelet to finish the pod",
    )
    time.sleep(0.3)

    # Then it is still there, terminating; a new finalizer is refused; removing the last one ends it
    pod = kube.core.read_namespaced_pod("kept", "default")
    assert pod.metadata.deletion_timestamp is not None
    assert pod.metadata.finalizers == [FINALIZER]
    with pytest.raises(ApiException) as refused:
        kube.core.patch_namespaced_pod(
            "kept", "default", {"metadata": {"finalizers": [FINALIZER, "x.io/more"]}}
        )
    assert refused.value.status == 422
    assert "no new finalizers can be added" in status_of(refused.value)["message"]
    kube.core.patch_namespaced_pod("kept", "default", {"metadata": {"finalizers": None}})
    assert server.get_object("pods", "kept", "default") is None


def test_a_force_delete_does_not_remove_a_pod_that_still_has_finalizers(
    server: KubeServer, kube: Kube
) -> None:
    # Given a running pod with a finalizer
    server.seed({"nodes": nodes_seed(1)})
    kube.core.create_namespaced_pod("default", _pod("kept", node_name(0, 10), finalizers=[FINALIZER]))
    _running(server, "kept")

    # When it is deleted with grace period 0
    answer = kube.core.delete_namespaced_pod("kept", "default", grace_period_seconds=0)

    # Then it is marked, not removed, until an update takes the finalizer off
    assert answer.metadata.deletion_grace_period_seconds == 0
    assert server.get_object("pods", "kept", "default") is not None
    pod = kube.core.read_namespaced_pod("kept", "default")
    pod.metadata.finalizers = []
    kube.core.replace_namespaced_pod("kept", "default", pod)
    assert server.get_object("pods", "kept", "default") is None


def test_removing_a_finalizer_does_not_cut_a_graceful_shutdown_short(server: KubeServer, kube: Kube) -> None:
    # Given a pod with a finalizer that takes 1 s to stop, being deleted
    server.seed({"nodes": nodes_seed(1)})
    kube.core.create_namespaced_pod(
        "default", _pod("slow", node_name(0, 10), finalizers=[FINALIZER], shutdown=1)
    )
    _running(server, "slow")
    started = time.monotonic()
    # (the kubelet held back until the check: under load the delete and the patch can outlast its 1 s shutdown)
    with server.paused_controllers():
        kube.core.delete_namespaced_pod("slow", "default")

        # When its finalizer is removed at once
        kube.core.patch_namespaced_pod("slow", "default", {"metadata": {"finalizers": None}})

        # Then it still runs until its shutdown is over, and then it goes
        assert server.get_object("pods", "slow", "default") is not None
    wait_until(lambda: server.get_object("pods", "slow", "default") is None, what="slow gone")
    assert time.monotonic() - started >= 0.9


def test_any_object_with_a_finalizer_is_only_marked_when_deleted(server: KubeServer, kube: Kube) -> None:
    # Given a ConfigMap with a finalizer
    kube.core.create_namespaced_config_map(
        "default", {"metadata": {"name": "cm", "finalizers": [FINALIZER]}, "data": {"k": "v"}}
    )

    # When it is deleted
    kube.core.delete_namespaced_config_map("cm", "default")

    # Then it stays with a deletion timestamp until the finalizer is removed
    marked = kube.core.read_namespaced_config_map("cm", "default")
    assert marked.metadata.deletion_timestamp is not None
    kube.core.patch_namespaced_config_map("cm", "default", {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as gone:
        kube.core.read_namespaced_config_map("cm", "default")
    assert gone.value.status == 404


def test_a_node_whose_kubelet_is_lost_goes_unknown_and_its_pods_never_finish_terminating(
    server: KubeServer, kube: Kube
) -> None:
    # Given two running pods on a node
    server.seed({"nodes": nodes_seed(1)})
    node = node_name(0, 10)
    for name in ("a", "b"):
        kube.core.create_namespaced_pod("default", _pod(name, node))
        _running(server, name)

    # When its kubelet is lost (the controller notices after 0.2 s) and one pod is deleted gracefully
    server.kill_kubelet(node, grace_seconds=0.2)
    kube.core.delete_namespaced_pod("a", "default")
    wait_until(lambda: _ready_status(server, node) == "Unknown", what="the node to turn Unknown")
    time.sleep(0.5)  # far longer than the pod's 0.1 s shutdown

    # Then the node is Unknown and tainted unreachable, its pods unready, and the deleted one still terminating
    found = server.get_object("nodes", node)
    assert found is not None
    ready = next(c for c in found["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "NodeStatusUnknown"
    assert {(t["key"], t["effect"]) for t in found["spec"]["taints"]} == {
        ("node.kubernetes.io/unreachable", "NoSchedule"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
    }
    terminating = server.get_object("pods", "a", "default")
    assert terminating is not None
    assert terminating["metadata"].get("deletionTimestamp")
    assert not any(is_ready(p) for p in server.objects("pods", "default"))

    # ...until a force delete removes it at once, as the real API server does
    kube.core.delete_namespaced_pod("a", "default", grace_period_seconds=0)
    assert server.get_object("pods", "a", "default") is None


def test_deleting_the_node_of_a_lost_kubelet_garbage_collects_its_pods(
    server: KubeServer, kube: Kube
) -> None:
    # Given a pod being deleted on a node whose kubelet is gone, and another with a finalizer
    server.pod_gc_quarantine_seconds = 0  # (podgc's 40 s quarantine: over at once here)
    server.seed({"nodes": nodes_seed(1)})
    node = node_name(0, 10)
    kube.core.create_namespaced_pod("default", _pod("stuck", node))
    kube.core.create_namespaced_pod("default", _pod("kept", node, finalizers=[FINALIZER]))
    _running(server, "stuck")
    _running(server, "kept")
    server.kill_kubelet(node, grace_seconds=0)
    kube.core.delete_namespaced_pod("stuck", "default")
    time.sleep(0.3)
    assert server.get_object("pods", "stuck", "default") is not None

    # When the node object is deleted
    kube.core.delete_node(node)

    # Then pod garbage collection force-deletes its pods: gone, except the one whose finalizer is still there
    wait_until(lambda: server.get_object("pods", "stuck", "default") is None, what="stuck collected")
    kept = server.get_object("pods", "kept", "default")
    assert kept is not None
    assert kept["metadata"]["deletionGracePeriodSeconds"] == 0


def test_a_revived_kubelet_finishes_what_was_pending(server: KubeServer, kube: Kube) -> None:
    # Given a pod deleted on a node whose kubelet was lost
    server.seed({"nodes": nodes_seed(1)})
    node = node_name(0, 10)
    kube.core.create_namespaced_pod("default", _pod("later", node))
    _running(server, "later")
    server.kill_kubelet(node, grace_seconds=0)
    wait_until(lambda: _ready_status(server, node) == "Unknown", what="the node to turn Unknown")
    kube.core.delete_namespaced_pod("later", "default")

    # When the kubelet comes back
    server.revive_kubelet(node)

    # Then the node is Ready without the taints, and the pod's deletion completes
    assert _ready_status(server, node) == "True"
    assert not (server.get_object("nodes", node) or {})["spec"].get("taints")
    wait_until(lambda: server.get_object("pods", "later", "default") is None, what="later gone")


def test_a_kubelet_lost_on_an_idle_cluster_still_turns_its_node_unknown(
    server: KubeServer, kube: Kube
) -> None:
    # Given a cluster with nothing left to do (the controllers skip their passes while nothing changes)
    server.seed({"nodes": nodes_seed(1)})
    node = node_name(0, 10)
    kube.core.create_namespaced_pod("default", _pod("idle", node))
    _running(server, "idle")
    server.settle()
    time.sleep(0.5)

    # When its kubelet is lost, and nobody writes anything afterwards
    server.kill_kubelet(node, grace_seconds=0.2)

    # Then the node lifecycle controller still notices once the grace has passed, as on a real cluster
    wait_until(lambda: _ready_status(server, node) == "Unknown", what="the node to turn Unknown")


def test_a_shorter_grace_moves_the_deletion_deadline_from_when_the_deletion_was_asked(
    server: KubeServer, kube: Kube
) -> None:
    # Given two pods with a finalizer, deleted with a grace of 30 s: one that takes longer than its grace to
    # stop (so the second delete below, a second later, finds it still stopping however loaded the machine:
    # with 1.5 s, a second delete 1.6 s after the first found it stopped), one that takes 2.5 s
    server.seed({"nodes": nodes_seed(2)})
    kube.core.create_namespaced_pod(
        "default", _pod("slow", node_name(0, 10), finalizers=[FINALIZER], shutdown=60)
    )
    kube.core.create_namespaced_pod(
        "default", _pod("kept", node_name(1, 10), finalizers=[FINALIZER], shutdown=2.5)
    )
    _running(server, "slow")
    _running(server, "kept")
    first = kube.core.delete_namespaced_pod("slow", "default", grace_period_seconds=30).metadata
    kept_asked = kube.core.delete_namespaced_pod("kept", "default", grace_period_seconds=30).metadata
    asked = first.deletion_timestamp - timedelta(seconds=30)

    # When a second delete shortens the grace to 5 s over a second later
    time.sleep(1.1)
    second = kube.core.delete_namespaced_pod("slow", "default", grace_period_seconds=5).metadata

    # Then the deadline is the first request's time + 5 s (kube-apiserver's BeforeDelete moves the deadline back
    # by the old grace and forward by the new one), not the second request's time + 5 s
    assert (second.deletion_timestamp, second.deletion_grace_period_seconds) == (
        asked + timedelta(seconds=5),
        5,
    )

    # When the kubelet finishes the other pod (its own delete, grace 0), Then its deadline becomes the time its
    # deletion was asked, whenever the kubelet finished
    wait_until(
        lambda: kube.core.read_namespaced_pod("kept", "default").metadata.deletion_grace_period_seconds == 0,
        what="the kubelet to finish kept",
    )
    kept = kube.core.read_namespaced_pod("kept", "default").metadata
    assert kept.deletion_timestamp == kept_asked.deletion_timestamp - timedelta(seconds=30)


def test_a_kubelet_renews_its_lease_while_it_runs_and_leaves_it_once_lost() -> None:
    with KubeServer(tick_seconds=0.02, node_lease_renew_seconds=0.2) as server:
        kube = connect(server)
        node = node_name(0, 10)

        def renewed() -> Any:
            return kube.coordination.read_namespaced_lease(node, "kube-node-lease").spec.renew_time

        # Given a node its kubelet registered: its Lease in kube-node-lease, held by it and owned by the node
        server.seed({"nodes": nodes_seed(1)})
        lease = kube.coordination.read_namespaced_lease(node, "kube-node-lease")
        assert (lease.spec.holder_identity, lease.spec.lease_duration_seconds) == (node, 40)
        assert [(o.kind, o.name) for o in lease.metadata.owner_references] == [("Node", node)]

        # When time passes, Then the kubelet renews it
        first = lease.spec.renew_time
        wait_until(lambda: renewed() > first, what="a renewal")

        # When the kubelet is lost (its instance stopped), Then its Lease is renewed no more, while the node
        # object still says Ready (until the node monitor grace period, 40 s, has passed)
        server.kill_kubelet(node)
        last = renewed()
        time.sleep(0.7)  # more than three renewals of a live kubelet
        assert renewed() == last
        assert _ready_status(server, node) == "True"

        # When it is back, Then it renews its Lease at once
        server.revive_kubelet(node)
        wait_until(lambda: renewed() > last, what="the revived kubelet's renewal")

        # When the node goes, Then its Lease goes with it (garbage collected: the node owns it)
        server.remove_node(node)
        with pytest.raises(ApiException) as gone:
            renewed()
        assert gone.value.status == 404
        kube.api_client.close()


def test_a_live_kubelet_posts_its_unchanged_status_periodically_and_a_lost_one_does_not() -> None:
    # (the real kubelet every nodeStatusReportFrequency, 5 minutes: a new Ready lastHeartbeatTime, whole seconds)
    with KubeServer(tick_seconds=0.02, node_status_report_seconds=1.1) as server:
        node = node_name(0, 10)

        def heartbeat() -> str:
            found = server.get_object("nodes", node)
            assert found is not None
            return next(c["lastHeartbeatTime"] for c in found["status"]["conditions"] if c["type"] == "Ready")

        # Given a node its kubelet posted Ready
        server.seed({"nodes": nodes_seed(1)})
        first = heartbeat()

        # When time passes with nothing changed, Then its kubelet posts the node's status again
        wait_until(lambda: heartbeat() > first, what="a status report", timeout=5)

        # When the kubelet is lost, Then it posts none (the node still Ready until the node monitor's grace)
        server.kill_kubelet(node)
        last = heartbeat()
        time.sleep(2.5)  # more than two reports of a live kubelet
        assert (heartbeat(), _ready_status(server, node)) == (last, "True")


def test_a_kubelet_stamps_its_lease_and_its_heartbeat_by_its_own_clock() -> None:
    # (its node Lease controller's clock.Now, its ReadyCondition setter's nowFunc: Kubelet.clock.Now, not the server's)
    with KubeServer(
        tick_seconds=0.02, node_lease_renew_seconds=0.2, node_status_report_seconds=0.5
    ) as server:
        node = node_name(0, 10)

        def stamps() -> tuple[float, float]:
            found = server.get_object("nodes", node)
            lease = server.get_object("leases", node, namespace="kube-node-lease")
            assert found is not None
            assert lease is not None
            beat = next(c["lastHeartbeatTime"] for c in found["status"]["conditions"] if c["type"] == "Ready")
            return parse_rfc3339(lease["spec"]["renewTime"]), parse_rfc3339(beat)

        # Given a node whose kubelet's clock runs 30 s behind the server's
        server.seed({"nodes": nodes_seed(1)})
        server.set_kubelet_clock_offset(-30, node=node)

        # When it renews its Lease and posts its status again, Then both say a time 30 s behind the server's
        began = time.time()
        wait_until(
            lambda: max(stamps()) < began - 25, what="a renewal and a status report by the kubelet's clock"
        )
        renewed, beat = stamps()
        assert began - 31 <= renewed < began - 25
        assert began - 32 <= beat < began - 25

        with pytest.raises(ValueError, match="finite"):
            server.set_kubelet_clock_offset(float("nan"), node=node)


def _taints(server: KubeServer, node: str) -> set[tuple[str, str]]:
    found = server.get_object("nodes", node) or {}
    return {(t["key"], t["effect"]) for t in found["spec"].get("taints") or []}


def test_the_node_of_a_stopped_instance_stays_tainted_shutdown_until_it_starts_again() -> None:
    with KubeServer(tick_seconds=0.02, node_monitor_grace_seconds=0.2) as server:
        # Given a Ready node
        server.seed({"nodes": nodes_seed(1)})
        node = node_name(0, 10)

        # When its instance stops
        assert server.instance_stopped(node)

        # Then, once NotReady, the cloud provider taints it shutdown and keeps the node object
        wait_until(lambda: _ready_status(server, node) == "Unknown", what="the node to turn Unknown")
        assert ("node.cloudprovider.kubernetes.io/shutdown", "NoSchedule") in _taints(server, node)

        # ...until the instance runs again: Ready, and then without the shutdown taint (nor the unreachable ones)
        assert server.instance_started(node)
        assert _ready_status(server, node) == "True"
        wait_until(lambda: _taints(server, node) == set(), what="the taints lifted")
        assert not server.instance_stopped("no-such-node")


def test_the_shutdown_taint_stays_until_the_node_of_the_started_instance_says_ready() -> None:
    # (the cloud node lifecycle controller lifts it only from a node whose Ready condition is True, at its next pass:
    # k8s.io/cloud-provider controllers/nodelifecycle, MonitorNodes; a node not Ready yet is checked for shutdown)
    with KubeServer(tick_seconds=0.02, node_monitor_grace_seconds=0.2) as server:
        # Given the node of a stopped instance, tainted shutdown, whose kubelet posts its status a second after it
        # starts renewing its Lease once the instance boots
        server.seed({"nodes": nodes_seed(1)})
        node = node_name(0, 10)
        server.set_boot_status_lag(1.0, node=node)
        assert server.instance_stopped(node)
        wait_until(lambda: _ready_status(server, node) == "Unknown", what="the node to turn Unknown")
        shutdown = ("node.cloudprovider.kubernetes.io/shutdown", "NoSchedule")
        assert shutdown in _taints(server, node)

        # When the instance starts again
        assert server.instance_started(node)

        # Then the node keeps its shutdown taint while it is not Ready, and loses it once its kubelet posted Ready
        time.sleep(0.3)
        assert (_ready_status(server, node), shutdown in _taints(server, node)) == ("Unknown", True)
        wait_until(lambda: _ready_status(server, node) == "True", what="the kubelet's status")
        wait_until(lambda: shutdown not in _taints(server, node), what="the shutdown taint lifted")


def test_a_kubelet_whose_first_status_after_a_boot_is_late_says_not_ready_with_the_new_boot_id_first() -> (
    None
):
    # (the ReadyCondition setter says NotReady while the runtime's network is not ready: the CNI's node agent has not
    # written its config on this boot yet; the kubelet's next status sync says Ready)
    with KubeServer(tick_seconds=0.02, node_monitor_grace_seconds=60.0) as server:
        # Given a node whose instance stopped (its node still Ready within the grace), its kubelet posting its status
        # 0.5 s after it starts renewing its Lease once the instance boots
        server.seed({"nodes": nodes_seed(1)})
        node = node_name(0, 10)
        before = _boot_id(server, node)
        server.set_boot_status_lag(0.5, node=node)
        assert server.instance_stopped(node)

        # When the instance starts again
        assert server.instance_started(node)

        # Then its first status carries the new boot id and says NotReady (network not ready), then Ready
        wait_until(lambda: _boot_id(server, node) != before, what="the booted kubelet's first status")
        found = server.get_object("nodes", node) or {}
        (ready,) = [c for c in found["status"]["conditions"] if c["type"] == "Ready"]
        assert (ready["status"], ready["reason"]) == ("False", "KubeletNotReady")
        assert "NetworkPluginNotReady" in ready["message"]
        wait_until(lambda: _ready_status(server, node) == "True", what="the kubelet's Ready")


def _boot_id(server: KubeServer, node: str) -> str:
    found = server.get_object("nodes", node) or {}
    return str(found["status"]["nodeInfo"]["bootID"])


def test_a_kubelet_back_after_its_instance_booted_again_posts_a_new_boot_id_and_one_restarted_keeps_it() -> (
    None
):
    with KubeServer(tick_seconds=0.02, node_monitor_grace_seconds=0.2) as server:
        # Given a Ready node
        server.seed({"nodes": nodes_seed(1)})
        node = node_name(0, 10)
        first = _boot_id(server, node)

        # When its kubelet alone restarts (the instance runs on): the boot is the same, and so is its bootID
        server.kill_kubelet(node)
        server.revive_kubelet(node)
        assert _boot_id(server, node) == first

        # When its instance reboots (or stops and starts) and its kubelet is back: the kubelet posts the new boot's
        # id (/proc/sys/kernel/random/boot_id) with its status, Ready with it
        assert server.instance_rebooting(node)
        assert server.instance_started(node)
        assert _ready_status(server, node) == "True"
        second = _boot_id(server, node)
        assert second != first

        assert server.instance_stopped(node)
        assert server.instance_started(node)
        assert _boot_id(server, node) not in (first, second)


def test_a_kubelet_resumed_from_hibernation_keeps_its_boot_id_and_posts_only_a_changed_status() -> None:
    # (a hibernated instance resumes its kernel and processes: the same /proc/sys/kernel/random/boot_id; its kubelet
    # patches a changed status at once, an unchanged one at its next report: Kubelet.tryUpdateNodeStatus)
    with KubeServer(
        tick_seconds=0.02, node_monitor_grace_seconds=0.3, node_status_report_seconds=None
    ) as server:
        server.seed({"nodes": nodes_seed(1)})
        node = node_name(0, 10)
        first = _boot_id(server, node)

        def heartbeat() -> str:
            found = server.get_object("nodes", node)
            assert found is not None
            return next(c["lastHeartbeatTime"] for c in found["status"]["conditions"] if c["type"] == "Ready")

        # When its instance hibernates past the node monitor's grace (the node Unknown) and resumes: its kubelet
        # posts Ready again, on the same boot id, and the node loses its shutdown taint
        assert server.instance_stopped(node)
        wait_until(lambda: _ready_status(server, node) == "Unknown", what="the node Unknown")
        time.sleep(1.1)  # (a heartbeat a second later: whole seconds)
        before = heartbeat()
        assert ("node.cloudprovider.kubernetes.io/shutdown", "NoSchedule") in _taints(server, node)
        assert server.instance_resumed(node)
        assert (_ready_status(server, node), _boot_id(server, node)) == ("True", first)
        assert heartbeat() > before
        wait_until(
            lambda: ("node.cloudprovider.kubernetes.io/shutdown", "NoSchedule") not in _taints(server, node),
            what="the shutdown taint lifted from the Ready node",
        )


def test_a_kubelet_resumed_within_the_node_monitors_grace_posts_nothing_until_its_next_report() -> None:
    with KubeServer(
        tick_seconds=0.02, node_lease_renew_seconds=0.2, node_status_report_seconds=None
    ) as server:
        server.seed({"nodes": nodes_seed(1)})
        node = node_name(0, 10)
        first = _boot_id(server, node)
        found = server.get_object("nodes", node)
        assert found is not None
        before = found["status"]["conditions"]

        def renewed() -> str:
            lease = server.get_object("leases", node, namespace="kube-node-lease")
            assert lease is not None
            return str(lease["spec"]["renewTime"])

        # When its instance hibernates and resumes within the node monitor's grace (the node still Ready)
        assert server.instance_stopped(node)
        time.sleep(1.1)  # (a heartbeat posted now would be a second later: whole seconds)
        last = renewed()
        assert server.instance_resumed(node)

        # Then its kubelet renews its Lease, but posts no status (nothing changed): the node's conditions and boot id
        # as before the sleep
        wait_until(lambda: renewed() != last, what="the resumed kubelet's renewal")
        after = server.get_object("nodes", node)
        assert after is not None
        assert (after["status"]["conditions"], _boot_id(server, node)) == (before, first)


def test_a_kubelet_resumed_from_hibernation_renews_its_lease_once_what_was_left_of_its_interval_has_passed() -> (
    None
):
    # (its Lease controller waits on a Go timer, by the monotonic clock, which does not run while the instance sleeps:
    # after the resume the timer fires once what was left of its wait when the instance went to sleep has passed)
    renew = 2.0
    with KubeServer(
        tick_seconds=0.02, node_lease_renew_seconds=renew, node_status_report_seconds=None
    ) as server:
        server.seed({"nodes": nodes_seed(1)})
        node = node_name(0, 10)

        def renewed() -> float:
            lease = server.get_object("leases", node, namespace="kube-node-lease")
            assert lease is not None
            return parse_rfc3339(str(lease["spec"]["renewTime"]))

        # Given a kubelet that renewed its Lease, its instance hibernated half an interval after that renewal
        first = renewed()
        last = wait_until(lambda: renewed() if renewed() > first else None, what="a renewal")
        wait_until(lambda: time.time() >= last + renew / 2, what="half an interval since the renewal")
        assert server.instance_stopped(node)
        slept = time.time()
        left = last + renew - slept

        # When the instance resumes a few intervals later
        time.sleep(2 * renew)
        resumed = time.time()
        assert server.instance_resumed(node)

        # Then its kubelet renews its Lease once what was left of its interval has passed, not at once
        wait_until(lambda: renewed() > last, timeout=3 * renew, what="the resumed kubelet's renewal")
        assert renewed() >= resumed + left - 0.3, (
            f"renewed {renewed() - resumed:.2f} s after the resume, {left:.2f} s of its interval left at the sleep"
        )
