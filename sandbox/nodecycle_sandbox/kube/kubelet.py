"""The simulated kubelets of all nodes: pods start after a delay, report readiness and stop within their grace;
each live kubelet renews its node's Lease, a dead one leaves it as it was."""

from __future__ import annotations

import itertools
import secrets
import time

from nodecycle_sandbox.kube import errors, finalizers, node_lifecycle
from nodecycle_sandbox.kube.builders import (
    NODE_LEASE_NAMESPACE,
    ip_of_node_name,
    micro_time,
    node_lease,
    ready_condition,
)
from nodecycle_sandbox.kube.history import SANDBOX
from nodecycle_sandbox.kube.meta import (
    DEFAULT_GRACE_SECONDS,
    SHUTDOWN_ANNOTATION,
    START_ANNOTATION,
    JsonObj,
    float_annotation,
    is_terminating,
    json_copy,
    name_of,
    namespace_of,
    node_ready,
    pod_node,
    pod_phase,
    pod_ready,
    pod_terminal,
    rfc3339,
    uid_of,
    with_condition,
)
from nodecycle_sandbox.kube.resources import LEASES, NODES, PODS
from nodecycle_sandbox.kube.store import Store


class Kubelet:
    """Pod lifecycle on the nodes, driven by ``sync`` from the controller loop.

    Timers are monotonic and kept beside the objects (keyed by pod uid) because timestamps in the API have
    whole-second precision, too coarse for tests that time a 0.3 s shutdown.
    """

    def __init__(
        self,
        store: Store,
        *,
        start_seconds: float,
        shutdown_seconds: float,
        lease_renew_seconds: float,
        pleg_threshold_seconds: float = node_lifecycle.PLEG_THRESHOLD_SECONDS,
    ) -> None:
        self._store = store
        self.start_seconds = start_seconds
        self.shutdown_seconds = shutdown_seconds
        self.lease_renew_seconds = lease_renew_seconds
        # how long a hung runtime goes unnoticed: then the kubelet's PLEG is not healthy and it posts Ready=False
        self.pleg_threshold_seconds = pleg_threshold_seconds
        self._renewed_at: dict[str, float] = {}  # node -> its kubelet's last Lease renewal (monotonic)
        self._ready_at: dict[str, float] = {}
        self._dead: set[str] = set()  # nodes whose kubelet is gone
        self._gone_since: dict[str, float] = {}  # node -> when its kubelet went (monotonic): see resume
        # nodes whose kubelet runs (it renews its Lease) over a container runtime that hangs, and since when
        # (monotonic): it starts and stops none of their pods (a wedged containerd: StopContainer never returns),
        # and once its PLEG has not relisted for ``pleg_threshold_seconds`` it posts the node Ready=False
        self._hung: dict[str, float] = {}
        self._pleg_unhealthy: set[str] = set()  # hung nodes whose kubelet posted them NotReady for it
        self._gone_at: dict[str, float] = {}
        self._ips = itertools.count(10)
        # node -> how far its kubelet's clock runs ahead of the sandbox's (negative: behind). A kubelet stamps its
        # Lease's renewTime and its Ready condition's lastHeartbeatTime from its own clock (the node Lease controller's
        # clock.Now, component-helpers/apimachinery/lease; the ReadyCondition setter's nowFunc, Kubelet.clock.Now,
        # pkg/kubelet/nodestatus/setters.go), not the API server's: an instance's clock may be seconds off, more so
        # at boot before chrony has synchronised it
        self.clock_offsets: dict[str, float] = {}

    def delete_pod(
        self, pod: JsonObj, grace: int | None, *, verb: str, resource: str, source: str
    ) -> JsonObj:
        """Delete a pod the way the API server and kubelet do it together; returns the response object.

        A bound, running pod with a grace period is only marked (deletionTimestamp); the kubelet removes it
        once its simulated shutdown is over. Grace 0, an unbound pod or a finished pod go at once.
        """
        with self._store.lock:
            spec = pod.get("spec") or {}
            if grace is None:
                grace = int(spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS))
            if grace < 0:
                raise errors.bad_request("gracePeriodSeconds must not be negative")
            if grace == 0 or not pod_node(pod) or pod_terminal(pod):
                return self.end_pod(pod, verb=verb, source=source, resource=resource)
            now, mono = time.time(), time.monotonic()
            stop_after = min(float_annotation(pod, SHUTDOWN_ANNOTATION, self.shutdown_seconds), float(grace))
            meta = pod["metadata"]
            if is_terminating(pod) and grace >= int(meta.get("deletionGracePeriodSeconds", grace)):
                return pod  # a longer or equal grace never extends a deletion in progress
            updated = finalizers.marked(pod, grace, now)
            if self._stops_on(pod_node(pod)):
                # (signalled now: its app stops at its own pace, or at a shorter grace's end; on a node whose
                # kubelet is gone or whose runtime hangs, nothing is signalled until it is back: see _signal)
                uid = uid_of(pod)
                self._gone_at[uid] = min(self._gone_at.get(uid, float("inf")), mono + stop_after)
            return self._store.write(PODS, updated, verb=verb, source=source, resource=resource)

    def end_pod(self, pod: JsonObj, *, verb: str, source: str, resource: str = "") -> JsonObj:
        """Nothing runs for the pod any more: it goes, or, while it has finalizers, it stays marked (grace 0)
        until an update removes them. Returns the pod as the response shows it."""
        with self._store.lock:
            self._forget(uid_of(pod))
            if finalizers.pending(pod):
                if finalizers.stopped(pod):
                    return pod
                return self._store.write(
                    PODS, finalizers.marked(pod, 0), verb=verb, source=source, resource=resource
                )
            removed = self._store.remove(
                PODS, namespace_of(pod), name_of(pod), verb=verb, source=source, resource=resource
            )
            return removed or pod

    def kill(self, node: str) -> None:
        """The node's kubelet is gone: its pods neither start nor finish terminating any more."""
        with self._store.lock:
            self._dead.add(node)
            self._gone_since.setdefault(node, time.monotonic())

    def revive(self, node: str) -> None:
        """The node's kubelet is back: it stops the pods deleted while it was gone (see :meth:`_signal`)."""
        with self._store.lock:
            self._dead.discard(node)
            self._gone_since.pop(node, None)
            self._pleg_unhealthy.discard(node)  # (a kubelet that starts again checks its runtime afresh)
            self._signal(node)

    def resume(self, node: str) -> None:
        """The node's kubelet runs on where it stopped (its instance resumed from hibernation), as :meth:`revive`, but
        its next Lease renewal comes once what was left of its renewal interval when it went to sleep has passed, not
        at once: the Lease controller waits between renewals on a Go timer (wait.JitterUntil), and Go's timers run
        by the monotonic clock (CLOCK_MONOTONIC on Linux), which does not advance while the instance sleeps (golang/go
        issues 24595 and 35012): the timer fires that much after the resume, up to a whole interval (10 s)."""
        with self._store.lock:
            gone = self._gone_since.get(node)
            renewed = self._renewed_at.get(node)
            self.revive(node)
            if gone is not None and renewed is not None:
                left = max(0.0, renewed + self.lease_renew_seconds - gone)
                self._renewed_at[node] = time.monotonic() + left - self.lease_renew_seconds

    def hang_runtime(self, node: str, hung: bool = True) -> None:
        """The node's container runtime hangs (``hung``) or answers again: while it hangs, the pods deleted on the
        node stay Terminating past their grace, their kubelet alive; once it answers, they are stopped from then
        (see :meth:`_signal`)."""
        with self._store.lock:
            if hung:
                self._hung.setdefault(node, time.monotonic())
                return
            self._hung.pop(node, None)
            self._signal(node)
            if node in self._pleg_unhealthy:
                self._pleg_unhealthy.discard(node)
                found = self._store.get(NODES, "", node)
                if found is not None and node not in self._dead:
                    self._post_node_ready(found)  # (its PLEG relists within a second: Ready again)

    def check_runtimes(self) -> tuple[bool, float | None]:
        """The PLEG health check of each live kubelet whose runtime hangs: once it has not relisted for the
        threshold, the kubelet posts its node Ready=False (reason KubeletNotReady, "PLEG is not healthy"). Returns
        (posted any, when (monotonic) the next one turns unhealthy)."""
        with self._store.lock:
            mono = time.monotonic()
            changed = False
            due: list[float] = []
            for node, since in sorted(self._hung.items()):
                found = self._store.get(NODES, "", node)
                if found is None or node in self._dead or node in self._pleg_unhealthy:
                    continue
                if mono < since + self.pleg_threshold_seconds:
                    due.append(since + self.pleg_threshold_seconds)
                    continue
                posted = node_lifecycle.runtime_not_ready(
                    found, mono - since, self.pleg_threshold_seconds, self.now_on(node)
                )
                self._store.write(NODES, posted, verb="update", source=SANDBOX, resource="nodes/status")
                self._pleg_unhealthy.add(node)
                changed = True
            return changed, min(due, default=None)

    def now_on(self, node: str) -> float:
        """The time by the clock of ``node``'s kubelet (see clock_offsets), for the stamps it writes."""
        return time.time() + self.clock_offsets.get(node, 0.0)

    def _post_node_ready(self, node: JsonObj) -> None:
        now = self.now_on(name_of(node))
        updated = json_copy(node)
        status = updated.setdefault("status", {})
        status["conditions"] = with_condition(status.get("conditions") or [], ready_condition(True, now), now)
        self._store.write(NODES, updated, verb="update", source=SANDBOX, resource="nodes/status")

    def _stops_on(self, node: str) -> bool:
        """A kubelet runs on the node over a runtime that answers: what is deleted there is signalled at once."""
        return node not in self._dead and node not in self._hung

    def _signal(self, node: str) -> None:
        """The pods being deleted on ``node`` that nothing has signalled (deleted while its kubelet was gone, or
        its runtime hung) get their SIGTERM now: each stops within its deletion's grace counted from now, in its
        app's shutdown time, however long ago its deadline passed (a kubelet back kills a pod with its
        deletionGracePeriodSeconds, not what is left of it). Those signalled before stop at their own pace:
        confirmed at the next pass once it is over."""
        if not self._stops_on(node):
            return
        mono = time.monotonic()
        for pod in self._store.items(PODS):
            if pod_node(pod) != node or not is_terminating(pod) or finalizers.stopped(pod):
                continue
            grace = float(pod["metadata"].get("deletionGracePeriodSeconds", 0))
            stop_after = min(float_annotation(pod, SHUTDOWN_ANNOTATION, self.shutdown_seconds), grace)
            uid = uid_of(pod)
            self._gone_at[uid] = min(self._gone_at.get(uid, float("inf")), mono + stop_after)

    def alive_on(self, node: str) -> bool:
        return node not in self._dead

    def runtime_hung(self, node: str) -> bool:
        return node in self._hung

    def renew_lease(self, node: str) -> None:
        """The node's kubelet renews its Lease now (creating it, as a kubelet that starts does); a dead one
        does not."""
        with self._store.lock:
            found = self._store.get(NODES, "", node)
            if found is None or node in self._dead:
                return
            now = self.now_on(node)
            lease = self._store.get(LEASES, NODE_LEASE_NAMESPACE, node)
            if lease is None:
                created = node_lease(found, uid=self._store.new_uid(), now=now)
                # (its creationTimestamp the API server's)
                created["metadata"]["creationTimestamp"] = rfc3339(time.time())
                self._store.write(LEASES, created, verb="create", source=SANDBOX)
            else:
                renewed = json_copy(lease)
                renewed["spec"]["renewTime"] = micro_time(now)
                self._store.write(LEASES, renewed, verb="update", source=SANDBOX)
            self._renewed_at[node] = time.monotonic()

    def renew_leases(self) -> float | None:
        """Each live kubelet renews its Lease once ``lease_renew_seconds`` have passed since its last renewal;
        returns when the next renewal is due (monotonic)."""
        with self._store.lock:
            nodes = {name_of(n) for n in self._store.items(NODES)}
            for gone in set(self._renewed_at) - nodes:
                del self._renewed_at[gone]  # its Lease goes with the node (owner reference)
            mono = time.monotonic()
            due: list[float] = []
            for node in sorted(nodes - self._dead):
                renewed = self._renewed_at.get(node)
                if renewed is None or mono >= renewed + self.lease_renew_seconds:
                    self.renew_lease(node)
                    renewed = self._renewed_at[node]
                due.append(renewed + self.lease_renew_seconds)
            return min(due, default=None)

    def sync(self) -> tuple[bool, float | None]:
        """One kubelet pass over all bound pods; returns (changed anything, next monotonic deadline)."""
        with self._store.lock:
            nodes = {name_of(n): n for n in self._store.items(NODES)}
            self._dead &= set(nodes)  # a node registering again under a reused name has a kubelet of its own
            self._gone_since = {node: since for node, since in self._gone_since.items() if node in self._dead}
            self._hung = {node: since for node, since in self._hung.items() if node in nodes}
            self._pleg_unhealthy &= set(self._hung)
            changed = False
            deadlines: list[float] = []
            seen: set[str] = set()
            mono = time.monotonic()
            for pod in self._store.items(PODS):
                node = nodes.get(pod_node(pod))
                if node is None:
                    continue  # unbound, or its node is gone (the pod garbage collector removes it)
                uid = uid_of(pod)
                seen.add(uid)
                alive = node_ready(node)
                if pod_node(pod) in self._dead or pod_node(pod) in self._hung:
                    # No kubelet, or one whose runtime hangs (each of its calls never returns: no sandbox starts, no
                    # container stops, no pod status is posted): nothing starts or stops; the node lifecycle
                    # controller marks the pods unready once the node is not Ready.
                    if not alive and pod_ready(pod):
                        self._post_status(node_lifecycle.pod_not_ready(pod, time.time()))
                        changed = True
                    continue
                if is_terminating(pod):
                    if finalizers.stopped(pod):
                        continue  # finished; the object waits for its finalizers to be removed
                    # A live kubelet stops the pods deleted on its node even while it reports the node NotReady
                    # (its container runtime's network not ready): only a kubelet that is gone never does, or
                    # one whose runtime hangs (above).
                    gone_at = self._gone_at.setdefault(uid, mono + self.shutdown_seconds)
                    if mono >= gone_at:
                        self.end_pod(pod, verb="delete", source=SANDBOX)
                        changed = True
                    else:
                        deadlines.append(gone_at)
                elif pod_terminal(pod):
                    continue
                elif pod_phase(pod) != "Running":
                    start = float_annotation(pod, START_ANNOTATION, self.start_seconds)
                    ready_at = self._ready_at.setdefault(uid, mono + start)
                    if alive and mono >= ready_at:
                        self._post_status(self._running(pod, node))
                        changed = True
                    elif alive:
                        deadlines.append(ready_at)
                elif pod_ready(pod) != alive:
                    self._post_status(self._with_readiness(pod, alive))
                    changed = True
            for uid in set(self._ready_at) - seen:
                del self._ready_at[uid]
            for uid in set(self._gone_at) - seen:
                del self._gone_at[uid]
            return changed, min(deadlines, default=None)

    def _post_status(self, pod: JsonObj) -> None:
        """The kubelet reports a pod's status, as it does through the pods/status subresource."""
        self._store.write(PODS, pod, verb="update", source=SANDBOX, resource="pods/status")

    def _forget(self, uid: str) -> None:
        self._ready_at.pop(uid, None)
        self._gone_at.pop(uid, None)

    def _running(self, pod: JsonObj, node: JsonObj) -> JsonObj:
        now = time.time()
        n = next(self._ips)
        pod_ip = f"10.{100 + (n >> 16) % 100}.{(n >> 8) & 255}.{n & 255}"
        host_ip = ip_of_node_name(name_of(node)) or "10.0.0.1"
        updated = json_copy(pod)
        conditions: list[JsonObj] = (pod.get("status") or {}).get("conditions") or []
        for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"):
            conditions = with_condition(conditions, {"type": kind, "status": "True"}, now)
        started = rfc3339(now)
        updated["status"] = {
            "phase": "Running",
            "conditions": conditions,
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "startTime": started,
            "qosClass": "BestEffort",
            "containerStatuses": [
                {
                    "name": c.get("name", "app"),
                    "image": c.get("image", ""),
                    "imageID": "",
                    "containerID": f"containerd://{secrets.token_hex(32)}",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": started}},
                }
                for c in (pod.get("spec") or {}).get("containers") or []
            ],
        }
        return updated

    @staticmethod
    def _with_readiness(pod: JsonObj, ready: bool) -> JsonObj:
        """A node that stops reporting makes its pods unready, which PodDisruptionBudgets then see."""
        now = time.time()
        updated = json_copy(pod)
        status = updated.setdefault("status", {})
        value = "True" if ready else "False"
        conditions = status.get("conditions") or []
        for kind in ("Ready", "ContainersReady"):
            conditions = with_condition(conditions, {"type": kind, "status": value}, now)
        status["conditions"] = conditions
        for container in status.get("containerStatuses") or []:
            container["ready"] = ready
        return updated
