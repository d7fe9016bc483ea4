"""The simulated control plane: node readiness, garbage collection, Deployment / ReplicaSet / DaemonSet
controllers, mirror pods, a scheduler and the status writers, run together by one background loop."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass

from nodecycle_sandbox.kube import finalizers, namespaces, node_lifecycle
from nodecycle_sandbox.kube.api import Api
from nodecycle_sandbox.kube.builders import mirror_pod, pod_from_template, ready_condition, template_hash
from nodecycle_sandbox.kube.eviction import PodIndex, compute_budget
from nodecycle_sandbox.kube.history import SANDBOX
from nodecycle_sandbox.kube.kubelet import Kubelet
from nodecycle_sandbox.kube.meta import (
    ZONE_LABEL,
    JsonObj,
    controller_ref,
    is_terminating,
    json_copy,
    labels_of,
    name_of,
    namespace_of,
    node_ready,
    node_schedulable,
    owner_ref,
    pod_active,
    pod_node,
    pod_ready,
    pod_terminal,
    pods_capacity,
    uid_of,
    with_condition,
)
from nodecycle_sandbox.kube.patching import MERGE_PATCH
from nodecycle_sandbox.kube.resources import (
    ALL,
    DAEMONSETS,
    DEPLOYMENTS,
    EVENTS,
    NAMESPACES,
    NODES,
    PDBS,
    PODS,
    REPLICASETS,
    ResourceType,
)
from nodecycle_sandbox.kube.store import Store

logger = logging.getLogger(__name__)

# What the DaemonSet controller adds to its pods so that cordoned or failing nodes keep them.
# The sandbox kubelets' nodeStatusReportFrequency (real: 5 minutes), short enough for its tests (see
# Controllers.status_report_seconds)
STATUS_REPORT_SECONDS = 20.0
# kube-apiserver's --event-ttl, "Amount of time to retain events" (default 1h0m0s; kubernetes/kubernetes#124836:
# "kube-apiserver default event ttl is 1h"); EKS keeps the default unless the cluster's kubeApiServerConfig sets
# eventTtl
EVENT_TTL_SECONDS = 3600.0
# How long a booted kubelet whose first status post is late says NotReady before Ready (see
# Controllers.boot_network_lag): the VPC CNI's aws-node takes seconds to start; short here, for the tests' sake
BOOT_NETWORK_LAG_SECONDS = 1.0

_DAEMON_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
]


def daemon_tolerations(tolerations: list[JsonObj]) -> list[JsonObj]:
    """A DaemonSet pod's tolerations: its template's, and the controller's own (not-ready and unreachable
    NoExecute without seconds, unschedulable NoSchedule) in place of any of the template's of the same key, operator
    and effect (AddOrUpdateDaemonPodTolerations): however the template tolerates a failing node, its pods stay."""
    own = {(t["key"], t["operator"], t["effect"]) for t in _DAEMON_TOLERATIONS}
    kept = [
        t for t in tolerations if (t.get("key"), t.get("operator") or "Equal", t.get("effect")) not in own
    ]
    return kept + [dict(t) for t in _DAEMON_TOLERATIONS]


@dataclass(frozen=True)
class SyncResult:
    changed: bool  # the pass wrote something, so another pass may have more to do
    due: float | None  # the next monotonic time a timer (pod start / stop, node readiness) fires
    revision: int  # the store revision the pass ended at
    # the next monotonic time a kubelet renews its Lease: a timer of the loop's, but no work that settling waits
    # for (live kubelets renew for ever)
    renewal: float | None = None
    # the next monotonic time the node lifecycle controller marks a node whose kubelet is lost Unknown, its
    # taint manager deletes a pod of a tainted node, a hung runtime's kubelet posts its node NotReady, or podgc's
    # quarantine of a deleted node's pods ends: timers of the loop's, but no work that settling waits for either
    # (40 s, five minutes, three minutes and 40 s by default, with a node or its pods lingering meanwhile)
    lost_kubelets: float | None = None


@dataclass(frozen=True)
class StaticPod:
    name: str
    namespace: str
    image: str


class Controllers:
    """One ``sync`` is one pass of every controller under the store lock; passes are idempotent."""

    def __init__(
        self,
        store: Store,
        api: Api,
        kubelet: Kubelet,
        *,
        pod_gc_quarantine: float = 40.0,
        unreachable_toleration: float = 300.0,
        event_ttl: float = EVENT_TTL_SECONDS,
    ) -> None:
        self._store = store
        # How long an Event lasts after its last write (kube-apiserver's --event-ttl)
        self.event_ttl = event_ttl
        self._api = api
        self._kubelet = kubelet
        # podgc waits this long after it sees pods bound to a node that does not exist before it force-deletes
        # them (kube-controller-manager's quarantine: 40 s), in case the node was only late in its informer
        self.pod_gc_quarantine = pod_gc_quarantine
        # the taint manager's default for pods that do not tolerate the unreachable or not-ready taint themselves
        self.unreachable_toleration = unreachable_toleration
        self._orphaned_at: dict[str, float] = {}  # missing node -> when podgc first saw pods bound to it
        # (node, NoExecute taint key) -> when the taint manager first saw it there (monotonic)
        self._tainted_at: dict[tuple[str, str], float] = {}
        self._node_ready_at: dict[str, float] = {}
        self._kubelet_lost_at: dict[
            str, float
        ] = {}  # node -> when the controller notices its kubelet is gone
        self._stopped: set[str] = set()  # nodes whose instance is stopped: tainted shutdown once NotReady
        # How long after its instance booted (a reboot, a start) a kubelet first posts its node's status, its Lease
        # renewed from the start: the kubelet starts its node Lease controller beside its status loop (kubelet.go,
        # Kubelet.Run), and the first status post waits for the kubelet's registration and the status setters'
        # inputs (cadvisor's machine info, the runtime's state), so a rebooted kubelet may renew its Lease while the
        # node still shows the Ready and bootID left from before the reboot. 0: both at once.
        self.boot_status_lag = 0.0
        # The same, node by node, over boot_status_lag: one sandbox's nodes booting with and without the lag
        self.boot_status_lags: dict[str, float] = {}
        self._boot_status_at: dict[str, float] = {}  # node -> when its booted kubelet first posts status
        # How long a kubelet that posts its first status late (boot_status_lag) says NotReady before Ready: its first
        # post comes as its runtime is up but its network plugin not yet (the ReadyCondition setter's "container
        # runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady", until the CNI's node agent
        # has written its config again), the new bootID with it; Ready at the kubelet's next status sync.
        self.boot_network_lag = BOOT_NETWORK_LAG_SECONDS
        # How often a live kubelet posts its node's status with nothing changed, a new lastHeartbeatTime in its
        # Ready condition: the real one every nodeStatusReportFrequency (5 minutes; kubelet config, "the frequency
        # that kubelet posts node status to master if node status does not change"), at once on a change. Shorter
        # here, at a rate tests afford; None: only on a change.
        self.status_report_seconds: float | None = STATUS_REPORT_SECONDS
        # node -> when its kubelet last re-posted an unchanged status (monotonic)
        self._reported_at: dict[str, float] = {}
        self._static_pods: dict[str, list[StaticPod]] = {}

    # --- hooks for the sandbox's helpers ------------------------------------------------------------

    def make_ready_after(self, node: str, seconds: float) -> None:
        with self._store.lock:
            self._node_ready_at[node] = time.monotonic() + seconds

    def add_static_pod(self, node: str, pod: StaticPod) -> None:
        with self._store.lock:
            self._static_pods.setdefault(node, []).append(pod)

    def kill_kubelet(self, name: str, grace: float) -> None:
        """The node's kubelet stops (a dead instance, a crashed kubelet): ``grace`` seconds later the node
        lifecycle controller marks the node Unknown and unreachable."""
        with self._store.lock:
            if self._store.get(NODES, "", name) is None:
                raise LookupError(f"no node {name!r}")
            self._kubelet.kill(name)
            self._node_ready_at.pop(name, None)
            self._boot_status_at.pop(name, None)  # (gone before its first status post)
            self._kubelet_lost_at[name] = time.monotonic() + grace

    def hang_runtime(self, name: str, hung: bool) -> None:
        with self._store.lock:
            if self._store.get(NODES, "", name) is None:
                raise LookupError(f"no node {name!r}")
            self._kubelet.hang_runtime(name, hung)

    def instance_stopped(self, name: str, grace: float) -> bool:
        """The node's instance stopped: its kubelet is gone, and the node, once NotReady, is tainted shutdown
        (at once when it already is). False when there is no such node."""
        with self._store.lock:
            node = self._store.get(NODES, "", name)
            if node is None:
                return False
            self._stopped.add(name)
            self._kubelet.kill(name)
            self._node_ready_at.pop(name, None)
            self._boot_status_at.pop(name, None)  # (gone before its first status post)
            if node_ready(node):
                self._kubelet_lost_at.setdefault(name, time.monotonic() + grace)
            elif name not in self._kubelet_lost_at:
                self._store.write(
                    NODES, node_lifecycle.shut_down(node, time.time()), verb="update", source=SANDBOX
                )
            return True

    def instance_started(self, name: str) -> bool:
        """The node's instance runs again (started, or rebooted): its kubelet is back (Ready), posting the new
        boot's id, and the shutdown taint goes once the node says Ready. False when there is no such node."""
        with self._store.lock:
            self._stopped.discard(name)
            if self._store.get(NODES, "", name) is None:
                return False
            lag = self.boot_status_lags.get(name, self.boot_status_lag)
            if lag > 0:
                # Its Lease renewed from now on (the node lifecycle controller takes a renewed Lease for a live
                # kubelet: no Unknown comes), its status (Ready, the new bootID) posted only later
                self._kubelet.revive(name)
                self._kubelet_lost_at.pop(name, None)
                self._boot_status_at[name] = time.monotonic() + lag
            else:
                self.revive_kubelet(name, booted=True)
            # (its shutdown taint goes once the node says Ready: see sync_ready_taints)
            return True

    def instance_resumed(self, name: str) -> bool:
        """The node's instance resumed from hibernation: no boot (its kernel and processes restored from the
        hibernation image, /proc/sys/kernel/random/boot_id with them, so the kubelet's status.nodeInfo.bootID stays
        the same: MachineInfo setter, pkg/kubelet/nodestatus), its kubelet running on where it stopped. It renews its
        Lease once what was left of its renewal interval at the sleep has passed (Kubelet.resume), and posts its
        node's status only if that status changed (Kubelet.tryUpdateNodeStatus patches a changed status at once, an
        unchanged one once nodeStatusReportFrequency has passed since its last report, by a monotonic clock that did
        not run while the instance slept): a node the lifecycle controller marked Unknown meanwhile is posted Ready
        again; one still Ready (a sleep shorter than the node monitor's grace) gets a new heartbeat only at the next
        report. The shutdown taint goes once the node says Ready, as at a start. False when there is no such node."""
        with self._store.lock:
            self._stopped.discard(name)
            node = self._store.get(NODES, "", name)
            if node is None:
                return False
            self._kubelet.resume(name)
            self._kubelet_lost_at.pop(name, None)
            self._boot_status_at.pop(name, None)
            if not node_ready(node):
                posted = node_lifecycle.reachable(node, self._kubelet.now_on(name))
                self._store.write(NODES, posted, verb="update", source=SANDBOX, resource="nodes/status")
            return True

    def revive_kubelet(self, name: str, *, booted: bool = False) -> None:
        """The node's kubelet posts its status again: after its own restart (the same boot), or, ``booted``, on an
        instance that booted again (a reboot, a stop and start), with that boot's id."""
        with self._store.lock:
            node = self._store.get(NODES, "", name)
            if node is None:
                raise LookupError(f"no node {name!r}")
            self._kubelet.revive(name)
            self._kubelet_lost_at.pop(name, None)
            self._boot_status_at.pop(name, None)
            updated = node_lifecycle.reachable(node, self._kubelet.now_on(name), booted=booted)
            if updated != node:
                self._store.write(NODES, updated, verb="update", source=SANDBOX, resource="nodes/status")

    def set_node_ready(self, name: str, ready: bool) -> None:
        with self._store.lock:
            self._node_ready_at.pop(name, None)
            node = self._store.get(NODES, "", name)
            if node is None:
                raise LookupError(f"no node {name!r}")
            self._write_node_ready(node, ready)

    # --- the pass -----------------------------------------------------------------------------------

    def sync(self) -> SyncResult:
        """Run every controller once."""
        with self._store.lock:
            posted_ready: set[str] = set()
            changed, node_deadline, lost_deadline = self._sync_node_timers(posted_ready)
            unhealthy, runtime_deadline = self._kubelet.check_runtimes()
            changed |= unhealthy | self.sync_ready_taints(seen_before=posted_ready)
            evicted, eviction_deadline = self._evict_by_taints()
            collected, orphan_deadline = self.collect_garbage()
            changed |= evicted | collected
            expired, event_deadline = self.expire_events()
            changed |= expired
            emptied, namespace_deadline = self._sync_namespaces()
            changed |= emptied
            changed |= self._sync_static_pods()
            changed |= self._sync_deployments()
            changed |= self._sync_replicasets()
            changed |= self._sync_daemonsets()
            changed |= self._schedule()
            kubelet_changed, pod_deadline = self._kubelet.sync()
            changed |= kubelet_changed
            changed |= self._sync_statuses()
            revision = self._store.revision
            renewal = self._kubelet.renew_leases()
            report = self._report_statuses()
            changed |= self._store.revision != revision
            renewal = min((at for at in (renewal, report) if at is not None), default=None)
            deadlines = [d for d in (node_deadline, pod_deadline) if d is not None]
            # (a lagging namespace controller, a hung runtime's PLEG, or podgc's quarantine (40 s), is a timer of
            # the loop's, not work that settling waits for)
            timers = (
                lost_deadline,
                eviction_deadline,
                namespace_deadline,
                runtime_deadline,
                orphan_deadline,
                event_deadline,
            )
            lost = [d for d in timers if d is not None]
            return SyncResult(
                changed, min(deadlines, default=None), self._store.revision, renewal, min(lost, default=None)
            )

    def _sync_node_timers(self, posted_ready: set[str]) -> tuple[bool, float | None, float | None]:
        """Nodes turning Ready (their kubelet's post: added to ``posted_ready``), and nodes whose lost kubelet the
        controller notices; returns (changed anything, when the next turns Ready, when the next lost kubelet is
        noticed)."""
        mono = time.monotonic()
        changed = False
        for name, due in list(self._node_ready_at.items()):
            node = self._store.get(NODES, "", name)
            if node is None:
                del self._node_ready_at[name]
            elif mono >= due:
                del self._node_ready_at[name]
                if self._write_node_ready(node, True):
                    posted_ready.add(name)
                    changed = True
        for name, due in list(self._kubelet_lost_at.items()):
            node = self._store.get(NODES, "", name)
            if node is None:
                del self._kubelet_lost_at[name]
                self._stopped.discard(name)
            elif mono >= due:
                del self._kubelet_lost_at[name]
                lost = node_lifecycle.unreachable(node, time.time())
                if name in self._stopped:
                    lost = node_lifecycle.shut_down(lost, time.time())
                self._store.write(NODES, lost, verb="update", source=SANDBOX, resource="nodes/status")
                changed = True
        for name, due in list(self._boot_status_at.items()):
            if mono < due:
                continue
            del self._boot_status_at[name]
            node = self._store.get(NODES, "", name)
            if node is not None and self._kubelet.alive_on(name):
                posted = node_lifecycle.reachable(node, self._kubelet.now_on(name), booted=True)
                if self.boot_network_lag > 0:
                    # (NotReady first, its network plugin not ready yet: Ready at its next status sync)
                    posted = node_lifecycle.network_not_ready(posted, self._kubelet.now_on(name))
                    self._node_ready_at[name] = mono + self.boot_network_lag
                else:
                    posted_ready.add(name)
                self._store.write(NODES, posted, verb="update", source=SANDBOX, resource="nodes/status")
                changed = True
        ready_due = min((*self._node_ready_at.values(), *self._boot_status_at.values()), default=None)
        return changed, ready_due, min(self._kubelet_lost_at.values(), default=None)

    def _report_statuses(self) -> float | None:
        """Each live kubelet whose node it posted Ready posts it again, unchanged but for the Ready condition's
        lastHeartbeatTime, once ``status_report_seconds`` have passed since its last post; not a kubelet that booted
        and has not posted its first status yet, nor one whose runtime hung. Returns when the next post is due."""
        every = self.status_report_seconds
        if every is None:
            return None
        mono = time.monotonic()
        due: list[float] = []
        names = set()
        for node in self._store.items(NODES):
            name = name_of(node)
            names.add(name)
            if (
                not self._kubelet.alive_on(name)
                or name in self._boot_status_at
                or self._kubelet.runtime_hung(name)
                or not node_ready(node)
            ):
                self._reported_at.pop(name, None)
                continue
            last = self._reported_at.setdefault(name, mono)
            if mono >= last + every:
                now = self._kubelet.now_on(name)
                posted = json_copy(node)
                status = posted.setdefault("status", {})
                status["conditions"] = with_condition(
                    status.get("conditions") or [], ready_condition(True, now), now
                )
                self._store.write(NODES, posted, verb="update", source=SANDBOX, resource="nodes/status")
                last = self._reported_at[name] = mono
            due.append(last + every)
        for gone in set(self._reported_at) - names:
            del self._reported_at[gone]
        return min(due, default=None)

    def _write_node_ready(self, node: JsonObj, ready: bool) -> bool:
        if node_ready(node) == ready:
            return False
        now = self._kubelet.now_on(name_of(node))  # (the kubelet's post, stamped by its clock)
        updated = json_copy(node)
        status = updated.setdefault("status", {})
        status["conditions"] = with_condition(
            status.get("conditions") or [], ready_condition(ready, now), now
        )
        self._store.write(NODES, updated, verb="update", source=SANDBOX, resource="nodes/status")
        return True

    def sync_ready_taints(self, seen_before: Collection[str] = ()) -> bool:
        """The node lifecycle controller's taints for each node's Ready condition (not-ready while False,
        unreachable while Unknown, neither while True) and for its cordon (unschedulable:NoSchedule while
        spec.unschedulable), and the cloud node lifecycle controller's lifting of the shutdown taint from a Ready
        node; returns whether it wrote any. Not yet for the nodes whose
        kubelet posted Ready in this pass (``seen_before``): the controller sees a kubelet's post only after it,
        from its informer, so a node is Ready and still tainted not-ready until its next pass, as on a cluster."""
        changed = False
        now = time.time()
        for node in self._store.items(NODES):
            if name_of(node) in seen_before:
                continue
            updated = node_lifecycle.with_unschedulable_taint(
                node_lifecycle.with_ready_taints(node, now), now
            )
            if node_ready(updated) and node_lifecycle.tainted_shutdown(updated):
                # The cloud node lifecycle controller lifts the shutdown taint from a node whose Ready condition is
                # True, at its pass (k8s.io/cloud-provider controllers/nodelifecycle, MonitorNodes), not as its
                # instance starts: while the booted kubelet has not posted Ready yet, the node keeps it
                updated = node_lifecycle.started(updated)
            if updated is not node:
                self._store.write(NODES, updated, verb="update", source=SANDBOX)
                changed = True
        return changed

    def _evict_by_taints(self) -> tuple[bool, float | None]:
        """The taint manager: the pods of a node with a NoExecute taint (not-ready, unreachable, out-of-service)
        are deleted, gracefully, once their toleration of it is over; returns (deleted any, when the next one is
        due)."""
        mono = time.monotonic()
        tainted: dict[str, list[str]] = {}
        for node in self._store.items(NODES):
            keys = node_lifecycle.evicting_taints(node)
            if keys:
                tainted[name_of(node)] = keys
        seen = {(name, key) for name, keys in tainted.items() for key in keys}
        self._tainted_at = {k: since for k, since in self._tainted_at.items() if k in seen}
        for k in seen:
            self._tainted_at.setdefault(k, mono)
        if not tainted:
            return False, None
        changed = False
        due: list[float] = []
        for pod in self._store.items(PODS):
            on_node = tainted.get(pod_node(pod))
            if on_node is None or not pod_active(pod):
                continue
            ends = []
            for key in on_node:
                seconds = node_lifecycle.toleration_seconds(pod, key, self.unreachable_toleration)
                if seconds is not None:  # (None: tolerated for ever)
                    ends.append(self._tainted_at[(pod_node(pod), key)] + seconds)
            if not ends:
                continue
            if mono < min(ends):
                due.append(min(ends))
                continue
            self._kubelet.delete_pod(pod, None, verb="delete", resource="pods", source=SANDBOX)
            changed = True
        return changed, min(due, default=None)

    def collect_garbage(self) -> tuple[bool, float | None]:
        """Pods of vanished nodes go once podgc's quarantine is over, and pods terminating on an out-of-service
        node at once; objects whose owners are all gone are deleted. Returns (changed anything, when the next
        quarantine ends)."""
        changed, due = self._collect_orphans()
        changed |= self._collect_out_of_service()
        for rt in ALL:
            for obj in self._store.items(rt):
                refs = obj["metadata"].get("ownerReferences") or []
                if (
                    is_terminating(obj)
                    or not refs
                    or any(self._store.has_uid(str(r.get("uid"))) for r in refs)
                    # an owner of a kind not served cannot be looked up: the garbage collector keeps its
                    # dependent and tries again later (kubernetes/kubernetes#98040), it never deletes it
                    or not all(_served(r) for r in refs)
                ):
                    continue
                if rt is PODS:
                    self._kubelet.delete_pod(obj, None, verb="delete", resource="pods", source=SANDBOX)
                elif finalizers.pending(obj):
                    self._store.write(rt, finalizers.marked(obj, 0), verb="delete", source=SANDBOX)
                else:
                    self._store.remove(rt, namespace_of(obj), name_of(obj), verb="delete", source=SANDBOX)
                changed = True
        return changed, due

    def _collect_out_of_service(self) -> bool:
        """podgc's gcTerminating: the pods being deleted on a node that is not Ready and carries the
        ``node.kubernetes.io/out-of-service`` taint (an operator's word that it is shut down for good) are
        force-deleted, finalizers permitting; on any other node, however long NotReady, they are left alone."""
        out_of_service = {
            name_of(n)
            for n in self._store.items(NODES)
            if not node_ready(n)
            and any(
                t.get("key") == node_lifecycle.OUT_OF_SERVICE_TAINT
                for t in (n.get("spec") or {}).get("taints") or []
            )
        }
        if not out_of_service:
            return False
        changed = False
        for pod in self._store.items(PODS):
            if pod_node(pod) in out_of_service and is_terminating(pod) and not finalizers.stopped(pod):
                pod = self._mark_failed(pod, None)
                self._kubelet.end_pod(pod, verb="delete", source=SANDBOX)
                changed = True
        return changed

    def _mark_failed(self, pod: JsonObj, condition: JsonObj | None) -> JsonObj:
        """podgc's markFailedAndDeletePod(WithCondition), before its delete (grace 0): a pod not in a terminal phase
        is moved to Failed, with ``condition`` (an orphan's DisruptionTarget), in one status write of its own; one
        whose kubelet is gone would otherwise stay Running for ever (and a Job's replacement wait for it)."""
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return pod
        updated = json_copy(pod)
        status = updated.setdefault("status", {})
        status["phase"] = "Failed"
        if condition is not None:
            status["conditions"] = with_condition(status.get("conditions") or [], condition, time.time())
        return self._store.write(PODS, updated, verb="update", source=SANDBOX, resource="pods/status")

    def _collect_orphans(self) -> tuple[bool, float | None]:
        """podgc's gcOrphaned: the pods bound to a node that does not exist stay as they were (Running, or
        Terminating with nothing to finish them) until the quarantine is over, then are force-deleted
        (finalizers permitting). A node registered again under that name in the meantime takes them back."""
        mono = time.monotonic()
        nodes = {name_of(n) for n in self._store.items(NODES)}
        orphans: dict[str, list[JsonObj]] = {}
        for pod in self._store.items(PODS):
            if pod_node(pod) and pod_node(pod) not in nodes and not finalizers.stopped(pod):
                orphans.setdefault(pod_node(pod), []).append(pod)
        for name in set(self._orphaned_at) - set(orphans):
            del self._orphaned_at[name]
        changed = False
        due: list[float] = []
        for name, pods in orphans.items():
            collect_at = self._orphaned_at.setdefault(name, mono) + self.pod_gc_quarantine
            if mono < collect_at:
                due.append(collect_at)
                continue
            del self._orphaned_at[name]
            for pod in pods:
                pod = self._mark_failed(pod, ORPHAN_DISRUPTION)
                self._kubelet.end_pod(pod, verb="delete", source=SANDBOX)
            changed = True
        return changed, min(due, default=None)

    def expire_events(self) -> tuple[bool, float | None]:
        """Events whose lease ran out go, as etcd deletes a key whose lease expired (a DELETED to watchers): the
        lease of --event-ttl is granted at each write of the Event (kube-apiserver's event registry, TTLFunc), so
        an Event lasts that long after its last create or update, read or not. Returns (removed any, when
        (monotonic) the next one expires)."""
        mono = time.monotonic()
        changed = False
        due: list[float] = []
        for (namespace, name), written in list(self._store.events_written.items()):
            ends = written + self.event_ttl
            if mono < ends:
                due.append(ends)
                continue
            self._store.remove(EVENTS, namespace, name, verb="delete", source=SANDBOX)
            changed = True
        return changed, min(due, default=None)

    def _sync_namespaces(self) -> tuple[bool, float | None]:
        """The namespace controller: empties each namespace being deleted once its lag is over, and removes it
        when nothing is left; returns (changed anything, when (monotonic) the next lagging one is due)."""
        changed = False
        due: list[float] = []
        now, mono = time.time(), time.monotonic()
        for namespace in self._store.items(NAMESPACES):
            if not is_terminating(namespace):
                continue
            at = namespaces.due(namespace, self._api.namespace_lag)
            if now < at:
                due.append(mono + at - now)
            else:
                changed |= namespaces.empty(self._store, self._kubelet, name_of(namespace))
        return changed, min(due, default=None)

    def _sync_static_pods(self) -> bool:
        changed = False
        for node_name, pods in list(self._static_pods.items()):
            node = self._store.get(NODES, "", node_name)
            if node is None:
                del self._static_pods[node_name]
                continue
            for static in pods:
                if namespaces.terminating(self._store, static.namespace):
                    continue  # the kubelet's create of its mirror pod is refused there (NamespaceLifecycle)
                mirror = mirror_pod(node, name=static.name, namespace=static.namespace, image=static.image)
                if self._store.get(PODS, static.namespace, mirror["metadata"]["name"]) is None:
                    self._api.create(PODS, static.namespace, mirror, source=SANDBOX)
                    changed = True
        return changed

    def _owned(self, rt: ResourceType, owner: JsonObj) -> list[JsonObj]:
        uid = uid_of(owner)
        return [
            o
            for o in self._store.items(rt, namespace_of(owner))
            if (controller_ref(o) or {}).get("uid") == uid
        ]

    def _scale(self, rs: JsonObj, replicas: int) -> bool:
        if (rs.get("spec") or {}).get("replicas") == replicas:
            return False
        patch = {"spec": {"replicas": replicas}}
        self._api.patch(REPLICASETS, namespace_of(rs), name_of(rs), MERGE_PATCH, patch, source=SANDBOX)
        return True

    def _sync_deployments(self) -> bool:
        """One ReplicaSet per pod template (named ``<deployment>-<hash>``); older ones are scaled to zero."""
        changed = False
        for deployment in self._store.items(DEPLOYMENTS):
            if namespaces.terminating(self._store, namespace_of(deployment)):
                continue  # its creates are refused there (NamespaceLifecycle), its scaling is moot
            spec = deployment["spec"]
            digest = template_hash(spec["template"])
            rs_name = f"{name_of(deployment)}-{digest}"
            owned = self._owned(REPLICASETS, deployment)
            current = next((rs for rs in owned if name_of(rs) == rs_name), None)
            if current is None:
                template = json_copy(spec["template"])
                template.setdefault("metadata", {}).setdefault("labels", {})["pod-template-hash"] = digest
                selector = json_copy(spec["selector"])
                selector.setdefault("matchLabels", {})["pod-template-hash"] = digest
                rs = {
                    "metadata": {
                        "name": rs_name,
                        "labels": dict(template["metadata"]["labels"]),
                        "ownerReferences": [owner_ref(deployment)],
                    },
                    "spec": {"replicas": spec["replicas"], "selector": selector, "template": template},
                }
                self._api.create(REPLICASETS, namespace_of(deployment), rs, source=SANDBOX)
                changed = True
            else:
                changed |= self._scale(current, spec["replicas"])
            for old in owned:
                if old is not current:
                    changed |= self._scale(old, 0)
        return changed

    def _pods_by_controller(self) -> dict[str, list[JsonObj]]:
        out: dict[str, list[JsonObj]] = {}
        for pod in self._store.items(PODS):
            ref = controller_ref(pod)
            if ref is not None:
                out.setdefault(str(ref.get("uid")), []).append(pod)
        return out

    def _sync_replicasets(self) -> bool:
        """Replace pods that are terminating or gone; remove surplus ones, unscheduled and unready first."""
        changed = False
        by_owner = self._pods_by_controller()
        for rs in self._store.items(REPLICASETS):
            if namespaces.terminating(self._store, namespace_of(rs)):
                continue  # its pods' creates are refused there (NamespaceLifecycle): the evicted stay unreplaced
            active = [p for p in by_owner.get(uid_of(rs), []) if pod_active(p)]
            missing = int(rs["spec"]["replicas"]) - len(active)
            for _ in range(missing):
                pod = pod_from_template(rs["spec"]["template"], namespace=namespace_of(rs), owner=rs)
                self._api.create(PODS, namespace_of(rs), pod, source=SANDBOX)
                changed = True
            if missing < 0:
                newest_first = sorted(active, key=lambda p: p["metadata"]["creationTimestamp"], reverse=True)
                victims = sorted(newest_first, key=lambda p: (bool(pod_node(p)), pod_ready(p)))[:-missing]
                for pod in victims:
                    self._kubelet.delete_pod(pod, None, verb="delete", resource="pods", source=SANDBOX)
                changed = True
        return changed

    def _daemon_nodes(self, ds: JsonObj, nodes: list[JsonObj]) -> set[str]:
        """The nodes the DaemonSet wants a pod on: those its selector picks whose NoExecute taints its pods
        tolerate for ever (an out-of-service node's taint evicts them: none is placed there again)."""
        template = (ds["spec"].get("template") or {}).get("spec") or {}
        selector = template.get("nodeSelector") or {}
        tolerations = daemon_tolerations(list(template.get("tolerations") or []))
        return {
            name_of(n)
            for n in nodes
            if all(labels_of(n).get(k) == v for k, v in selector.items())
            and all(
                node_lifecycle.tolerates_for_ever(tolerations, key)
                for key in node_lifecycle.evicting_taints(n)
            )
        }

    def _sync_daemonsets(self) -> bool:
        """One pod per matching node, bound directly and tolerating cordoned and failing nodes."""
        changed = False
        by_owner = self._pods_by_controller()
        nodes = self._store.items(NODES)
        for ds in self._store.items(DAEMONSETS):
            if namespaces.terminating(self._store, namespace_of(ds)):
                continue  # its pods' creates are refused there (NamespaceLifecycle)
            wanted = self._daemon_nodes(ds, nodes)
            placed: dict[str, list[JsonObj]] = {}
            for pod in by_owner.get(uid_of(ds), []):
                if pod_active(pod):
                    placed.setdefault(pod_node(pod), []).append(pod)
            for node in sorted(wanted - set(placed)):
                pod = pod_from_template(ds["spec"]["template"], namespace=namespace_of(ds), owner=ds)
                pod["spec"]["nodeName"] = node
                pod["spec"]["tolerations"] = daemon_tolerations(list(pod["spec"].get("tolerations") or []))
                self._api.create(PODS, namespace_of(ds), pod, source=SANDBOX)
                changed = True
            for node, pods in placed.items():
                for pod in pods if node not in wanted else pods[1:]:
                    self._kubelet.delete_pod(pod, None, verb="delete", resource="pods", source=SANDBOX)
                    changed = True
        return changed

    def _schedule(self) -> bool:
        """Bind pending pods to Ready, schedulable nodes with room, spreading each owner's pods over zones
        and nodes, then preferring the least loaded node (name breaks ties, for repeatable tests)."""
        pods = self._store.items(PODS)
        pending = [p for p in pods if not pod_node(p) and pod_active(p)]
        if not pending:
            return False
        all_nodes = self._store.items(NODES)
        # (Ready nodes: the not-ready taint's filter for pods that do not tolerate it; and a cordoned one for the
        # pods that tolerate node.kubernetes.io/unschedulable:NoSchedule, as the NodeUnschedulable filter lets them)
        nodes = [n for n in all_nodes if node_ready(n)]
        zone = {name_of(n): labels_of(n).get(ZONE_LABEL, "") for n in all_nodes}
        load: Counter[str] = Counter()
        per_node: Counter[tuple[str, str]] = Counter()
        per_zone: Counter[tuple[str, str]] = Counter()
        for pod in pods:
            node = pod_node(pod)
            if node and not pod_terminal(pod):
                owner = str((controller_ref(pod) or {}).get("uid", ""))
                load[node] += 1
                per_node[(node, owner)] += 1
                per_zone[(zone.get(node, ""), owner)] += 1
        changed = False
        now = time.time()
        for pod in sorted(pending, key=lambda p: (p["metadata"]["creationTimestamp"], name_of(p))):
            owner = str((controller_ref(pod) or {}).get("uid", ""))
            selector = (pod.get("spec") or {}).get("nodeSelector") or {}
            tolerates_cordon = node_lifecycle.tolerates(pod, node_lifecycle.UNSCHEDULABLE_TAINT, "NoSchedule")
            fits = [
                n
                for n in nodes
                if load[name_of(n)] < pods_capacity(n)
                and (tolerates_cordon or node_schedulable(n))
                and all(labels_of(n).get(k) == v for k, v in selector.items())
            ]
            updated = json_copy(pod)
            status = updated.setdefault("status", {})
            if not fits:
                unschedulable = {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "no Ready, schedulable node has room for the pod",
                }
                status["conditions"] = with_condition(status.get("conditions") or [], unschedulable, now)
                if updated != pod:
                    self._store.write(PODS, updated, verb="update", source=SANDBOX, resource="pods/status")
                    changed = True
                continue
            best = min(
                fits,
                key=lambda n: (
                    per_node[(name_of(n), owner)] + per_zone[(zone[name_of(n)], owner)],
                    load[name_of(n)],
                    name_of(n),
                ),
            )
            node = name_of(best)
            updated["spec"]["nodeName"] = node
            scheduled = {"type": "PodScheduled", "status": "True"}
            status["conditions"] = with_condition(status.get("conditions") or [], scheduled, now)
            self._store.write(PODS, updated, verb="create", source=SANDBOX, resource="pods/binding")
            load[node] += 1
            per_node[(node, owner)] += 1
            per_zone[(zone[node], owner)] += 1
            changed = True
        return changed

    # --- status writers -----------------------------------------------------------------------------

    def _write_status(self, rt: ResourceType, obj: JsonObj, status: JsonObj) -> bool:
        if obj.get("status") == status:
            return False
        updated = json_copy(obj)
        updated["status"] = status
        self._store.write(rt, updated, verb="update", source=SANDBOX, resource=f"{rt.plural}/status")
        return True

    def _sync_statuses(self) -> bool:
        changed = False
        by_owner = self._pods_by_controller()
        now = time.time()

        def counts(owner: JsonObj) -> tuple[int, int]:
            active = [p for p in by_owner.get(uid_of(owner), []) if pod_active(p)]
            return len(active), sum(1 for p in active if pod_ready(p))

        replica_counts: dict[str, tuple[int, int]] = {}
        for rs in self._store.items(REPLICASETS):
            total, ready = replica_counts[uid_of(rs)] = counts(rs)
            status = {
                "replicas": total,
                "fullyLabeledReplicas": total,
                "readyReplicas": ready,
                "availableReplicas": ready,
                "observedGeneration": rs["metadata"]["generation"],
            }
            changed |= self._write_status(REPLICASETS, rs, status)
        for deployment in self._store.items(DEPLOYMENTS):
            digest = template_hash(deployment["spec"]["template"])
            owned = self._owned(REPLICASETS, deployment)
            total = sum(replica_counts.get(uid_of(rs), (0, 0))[0] for rs in owned)
            ready = sum(replica_counts.get(uid_of(rs), (0, 0))[1] for rs in owned)
            updated = sum(
                replica_counts.get(uid_of(rs), (0, 0))[0] for rs in owned if name_of(rs).endswith(digest)
            )
            status = {
                "observedGeneration": deployment["metadata"]["generation"],
                "replicas": total,
                "updatedReplicas": updated,
                "readyReplicas": ready,
                "availableReplicas": ready,
                "unavailableReplicas": max(0, int(deployment["spec"]["replicas"]) - ready),
            }
            changed |= self._write_status(DEPLOYMENTS, deployment, status)
        nodes = self._store.items(NODES)
        for ds in self._store.items(DAEMONSETS):
            total, ready = counts(ds)
            status = {
                "currentNumberScheduled": total,
                "desiredNumberScheduled": len(self._daemon_nodes(ds, nodes)),
                "numberMisscheduled": 0,
                "numberReady": ready,
                "numberAvailable": ready,
                "updatedNumberScheduled": total,
                "observedGeneration": ds["metadata"]["generation"],
            }
            changed |= self._write_status(DAEMONSETS, ds, status)
        index = PodIndex(self._store.items(PODS))
        for pdb in self._store.items(PDBS):
            budget = compute_budget(self._store, pdb, index)
            if budget.failure is not None:
                changed |= self._write_status(PDBS, pdb, _fail_safe(pdb, budget.failure, now))
                continue
            allowed = budget.allowed > 0
            condition = {
                "type": "DisruptionAllowed",
                "status": "True" if allowed else "False",
                "reason": "SufficientPods" if allowed else "InsufficientPods",
                "message": "",
                "observedGeneration": pdb["metadata"]["generation"],
            }
            old_conditions = (pdb.get("status") or {}).get("conditions") or []
            status = {
                "observedGeneration": pdb["metadata"]["generation"],
                "expectedPods": budget.expected,
                "desiredHealthy": budget.desired,
                "currentHealthy": budget.current,
                "disruptionsAllowed": budget.allowed,
                "conditions": with_condition(old_conditions, condition, now),
            }
            if budget.disrupted:
                status["disruptedPods"] = budget.disrupted
            changed |= self._write_status(PDBS, pdb, status)
        return changed


# The condition podgc's gcOrphaned gives a pod of a node that no longer exists, with phase Failed, before it
# force-deletes it (kube-controller-manager, pkg/controller/podgc/gc_controller.go, since 1.26)
ORPHAN_DISRUPTION: JsonObj = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "DeletionByPodGC",
    "message": "PodGC: node no longer exists",
}


def _fail_safe(pdb: JsonObj, failure: str, now: float) -> JsonObj:
    """The status the disruption controller's failSafe writes when its sync of ``pdb`` fails: no disruption allowed,
    DisruptionAllowed False for SyncFailed in the error's words, the rest as it was. Not observedGeneration, which
    only a sync that succeeds advances: a budget never synced stays "still being processed" to every eviction
    (429, Retry-After 10) for as long as its sync fails; one synced before answers on its last counts."""
    old = dict(pdb.get("status") or {})
    condition: JsonObj = {
        "type": "DisruptionAllowed",
        "status": "False",
        "reason": "SyncFailed",
        "message": failure,
    }
    if old.get("observedGeneration"):
        condition["observedGeneration"] = old["observedGeneration"]
    status: JsonObj = {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}
    status.update(old)
    status["disruptionsAllowed"] = 0
    status["conditions"] = with_condition(old.get("conditions") or [], condition, now)
    return status


# A pass holds the store's lock, and every API request waits for it. With hundreds of nodes a pass takes tens of
# milliseconds, and during a refresh something changes at every tick: passes back to back would hold the lock
# most of the time and make every request wait, a latency the real API server (whose controllers run apart,
# from informers) does not have. So the loop rests at least this many times a pass's length after it.
# Never more than MAX_REST, though: with thousands of nodes a pass takes a large part of a second, and resting
# twice that would delay what the controllers do (a node turning Ready, a pod gone) by seconds.
REST_PER_PASS = 2.0
MAX_REST = 0.15


def next_wait(tick: float, spent: float) -> float:
    """How long the loop sleeps after a pass that took ``spent`` seconds: a tick, or longer after a long
    pass, so that passes take at most ``1 / (1 + REST_PER_PASS)`` of the time, up to ``MAX_REST``."""
    return max(tick, min(REST_PER_PASS * spent, MAX_REST))


class ControllerLoop:
    """Runs ``Controllers.sync`` every tick on a daemon thread; skips a tick when nothing changed and no
    timer is due, so an idle sandbox costs nothing. A controller failure is kept and re-raised by ``check``."""

    def __init__(self, sync: Callable[[], SyncResult], revision: Callable[[], int], tick: float) -> None:
        self._sync = sync
        self._revision = revision
        self._tick = tick
        self._stop = threading.Event()
        self._poked = threading.Event()
        self._passing = threading.Lock()  # held by a pass, and by a test that holds the controllers back
        self._thread = threading.Thread(target=self._run, name="kube-sandbox-controllers", daemon=True)
        self.failure: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def poke(self) -> None:
        """Something changed that the store's revision does not show (a kubelet lost or revived, a timer
        set): run the next tick's pass even if nothing was written."""
        self._poked.set()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No pass runs meanwhile (one under way ends first): the state between a write and the controllers'
        answer to it, which a real cluster shows for a moment."""
        with self._passing:
            yield
        self._poked.set()

    def check(self) -> None:
        if self.failure is not None:
            raise RuntimeError("the sandbox controllers failed") from self.failure

    def _run(self) -> None:
        clean_revision = -1
        due: float | None = None
        wait = self._tick
        while not self._stop.wait(wait):
            wait = self._tick
            poked = self._poked.is_set()
            if not poked and self._revision() == clean_revision and (due is None or time.monotonic() < due):
                continue
            self._poked.clear()
            began = time.monotonic()
            try:
                with self._passing:
                    result = self._sync()
            except Exception as exc:  # kept for check(); the loop must outlive one bad pass
                logger.exception("sandbox controller pass failed")
                self.failure = exc
                continue
            finally:
                wait = next_wait(self._tick, time.monotonic() - began)
            timers = (result.due, result.renewal, result.lost_kubelets)
            due = min((at for at in timers if at is not None), default=None)
            clean_revision = -1 if result.changed else result.revision


_SERVED_KINDS = frozenset((rt.api_version, rt.kind) for rt in ALL)


def _served(ref: JsonObj) -> bool:
    """Whether an owner reference names a kind this server serves, so that the garbage collector can look
    its owner up."""
    return (str(ref.get("apiVersion")), str(ref.get("kind"))) in _SERVED_KINDS
