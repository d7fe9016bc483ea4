"""KubeServer: the in-memory Kubernetes API server of the sandbox, with its simulated nodes and controllers."""

from __future__ import annotations

import contextlib
import functools
import math
import ssl
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from nodecycle_sandbox.kube import namespaces
from nodecycle_sandbox.kube.access import Access, AccessEntry, load_manifest
from nodecycle_sandbox.kube.admission import Admission
from nodecycle_sandbox.kube.api import Api
from nodecycle_sandbox.kube.auth import (
    ADMIN_ACCESS_KEY,
    TOKEN_LIFETIME_SECONDS,
    check_eks_token,
    make_eks_token,
)
from nodecycle_sandbox.kube.builders import node_object
from nodecycle_sandbox.kube.controllers import (
    EVENT_TTL_SECONDS,
    STATUS_REPORT_SECONDS,
    ControllerLoop,
    Controllers,
    StaticPod,
)
from nodecycle_sandbox.kube.counters import Counters
from nodecycle_sandbox.kube.faults import KubeFaults
from nodecycle_sandbox.kube.history import SANDBOX, HistoryEntry
from nodecycle_sandbox.kube.httpd import FLOW_IDLE_TIMEOUT, KubeHTTPServer
from nodecycle_sandbox.kube.kubeconfig import write_kubeconfig
from nodecycle_sandbox.kube.kubelet import Kubelet
from nodecycle_sandbox.kube.meta import JsonObj, json_copy, name_of
from nodecycle_sandbox.kube.rbac import Rbac
from nodecycle_sandbox.kube.resources import CONFIGMAPS, NAMESPACES, NODES, RBAC_TYPES, ResourceType, by_name
from nodecycle_sandbox.kube.routing import Router
from nodecycle_sandbox.kube.seed import default_seed, load_seed
from nodecycle_sandbox.kube.store import Store
from nodecycle_sandbox.kube.tls import ServerCertificate, issue

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

_BUILTIN_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


class KubeServer:
    """A Kubernetes API server in this process, on loopback.

    The official Python client and kubectl work against it unchanged; everything they can do is also
    visible through the helpers here (``objects``, ``history``, ``counters``). The cluster may be seeded
    before or after ``start``. Bearer tokens must have the EKS form (see ``make_eks_token``).

    Args:
        tls: serve HTTPS with a fresh CA (``ca_pem``), else plain HTTP.
        tick_seconds: period of the kubelet / controller loop.
        pod_start_seconds: how long a scheduled pod takes to become Ready (annotation
            ``sandbox.nodecycle.io/start-seconds`` overrides it per pod).
        pod_shutdown_seconds: how long a deleted pod takes to stop, capped by its grace period
            (annotation ``sandbox.nodecycle.io/shutdown-seconds`` overrides it per pod).
        token_max_age_seconds: refuse EKS tokens signed longer ago than this: by default 900 s, as EKS does;
            None: no limit (for a kubeconfig's static token that must outlive 15 minutes, not the product).
        node_monitor_grace_seconds: how long after its kubelet is lost (``kill_kubelet``) a node turns
            Ready=Unknown (kube-controller-manager's ``--node-monitor-grace-period``: 40 s).
        node_lease_renew_seconds: how often each live kubelet renews its node's Lease in ``kube-node-lease``
            (the kubelet's: a quarter of its 40 s lease duration); a lost kubelet's Lease is left as it was.
        node_status_report_seconds: how often each live kubelet posts its node's status with nothing changed, a
            new Ready lastHeartbeatTime (the kubelet's nodeStatusReportFrequency: 5 minutes; shorter by default,
            for tests that wait for it); None: only on a change.
        pod_gc_quarantine_seconds: how long the pods of a deleted node stay in the API (Running, or
            Terminating) before the pod garbage collector force-deletes them (kube-controller-manager's
            quarantineTime: 40 s, the default). A test that wants them gone sooner says so (0: at once).
        unreachable_toleration_seconds: how long a pod without a toleration of its own stays on a node tainted
            unreachable before the taint manager deletes it (kube-apiserver's
            ``--default-unreachable-toleration-seconds``: 300 s), or tainted not-ready (its
            ``--default-not-ready-toleration-seconds``, the same here). With its kubelet gone, or its runtime
            hung, it stays Terminating.
        pleg_threshold_seconds: how long after its container runtime hangs (``hang_runtime``) a live kubelet posts
            its node Ready=False, "PLEG is not healthy" (the kubelet's relistThreshold: 3 min); the node lifecycle
            controller then taints it not-ready (NoExecute).
        namespace_controller_lag_seconds: how long after a namespace is deleted the namespace controller
            deletes what it holds (see ``kube/namespaces.py``); the namespace is Terminating meanwhile, and
            every create in it refused. 0, the default: at once, as the controller's reaction of moments.
    """

    def __init__(
        self,
        *,
        tls: bool = True,
        host: str = "127.0.0.1",
        port: int = 0,
        tick_seconds: float = 0.05,
        cluster_name: str = "sandbox",
        pod_start_seconds: float = 0.2,
        pod_shutdown_seconds: float = 0.0,
        token_max_age_seconds: float | None = TOKEN_LIFETIME_SECONDS,
        node_monitor_grace_seconds: float = 40.0,
        node_lease_renew_seconds: float = 10.0,
        node_status_report_seconds: float | None = STATUS_REPORT_SECONDS,
        pod_gc_quarantine_seconds: float = 40.0,
        unreachable_toleration_seconds: float = 300.0,
        pleg_threshold_seconds: float = 180.0,
        namespace_controller_lag_seconds: float = 0.0,
        flow_idle_timeout_seconds: float = FLOW_IDLE_TIMEOUT,
        event_ttl_seconds: float = EVENT_TTL_SECONDS,
    ) -> None:
        self.cluster_name = cluster_name
        # (the load balancer's before the API server: a connection idle this long is forgotten, see httpd.py)
        self._flow_idle_timeout = flow_idle_timeout_seconds
        self._tls = tls
        self._host = host
        self._port = port
        self._tick = tick_seconds
        self._token_max_age = token_max_age_seconds
        self._node_monitor_grace = node_monitor_grace_seconds
        self._store = Store()
        self._kubelet = Kubelet(
            self._store,
            start_seconds=pod_start_seconds,
            shutdown_seconds=pod_shutdown_seconds,
            lease_renew_seconds=node_lease_renew_seconds,
            pleg_threshold_seconds=pleg_threshold_seconds,
        )
        self._api = Api(self._store, self._kubelet)
        self._api.namespace_lag = namespace_controller_lag_seconds
        # kube-apiserver answers a JSON patch it cannot apply (a failed test) with a generic 422 and none of its
        # library's words (patching.refusal); the sandbox still gives them by default, for the node release
        # (adapters/kube/cluster_api._test_failed) reads them: False answers as kube-apiserver does
        self._controllers = Controllers(
            self._store,
            self._api,
            self._kubelet,
            pod_gc_quarantine=pod_gc_quarantine_seconds,
            unreachable_toleration=unreachable_toleration_seconds,
            event_ttl=event_ttl_seconds,
        )
        self._controllers.status_report_seconds = node_status_report_seconds
        self._counters = Counters()
        self.rbac = Rbac()
        self._store.listeners.append(self._rbac_changed)
        self.access = Access(self.rbac, lambda namespace, name: self._store.get(CONFIGMAPS, namespace, name))
        self.access.add_admin_key(ADMIN_ACCESS_KEY)
        # Off until armed: `server.faults.arm([Fault(...)], seed)` (see nodecycle_sandbox.faults).
        self.faults = KubeFaults()
        # No webhook until a test registers one: `server.admission.deny(Denial(...))` (see kube/admission.py)
        self.admission = Admission()
        self._httpd: KubeHTTPServer | None = None
        self._serve_thread: threading.Thread | None = None
        self._loop: ControllerLoop | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._certificate: ServerCertificate | None = None
        for namespace in _BUILTIN_NAMESPACES:
            self._api.create(NAMESPACES, "", {"metadata": {"name": namespace}}, source=SANDBOX)

    # --- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> KubeServer:
        if self._httpd is not None:
            raise RuntimeError("the server is already started")
        self._tmp = tempfile.TemporaryDirectory(prefix="nodecycle-kube-")
        context = None
        if self._tls:
            self._certificate = issue(self._host)
            cert_file, key_file = Path(self._tmp.name, "server.crt"), Path(self._tmp.name, "server.key")
            cert_file.write_bytes(self._certificate.cert_pem)
            key_file.write_bytes(self._certificate.key_pem)
            Path(self._tmp.name, "ca.crt").write_bytes(self._certificate.ca_pem)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(cert_file, key_file)
            context.set_alpn_protocols(["http/1.1"])  # no h2: this server speaks HTTP/1.1 only
        router = Router(
            store=self._store,
            api=self._api,
            kubelet=self._kubelet,
            counters=self._counters,
            check_token=functools.partial(
                check_eks_token, max_age_seconds=self._token_max_age, cluster_name=self.cluster_name
            ),
            server_address=lambda: f"{self._host}:{self.port}",
            access=self.access,
            admission=self.admission,
        )
        self._httpd = KubeHTTPServer((self._host, self._port), router, context, self.faults)
        self._httpd.flow_idle_timeout = self._flow_idle_timeout
        self._serve_thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="kube-sandbox-http",
            daemon=True,
        )
        self._serve_thread.start()
        self._loop = ControllerLoop(self._controllers.sync, lambda: self._store.revision, self._tick)
        self._loop.start()
        return self

    @contextlib.contextmanager
    def paused_controllers(self) -> Iterator[None]:
        """Hold the controllers back meanwhile (the API server still serves): what a client sees between a
        write and the controllers' answer to it, e.g. a PodDisruptionBudget changed and not yet observed."""
        assert self._loop is not None, "the server is not started"
        with self._loop.paused():
            yield

    def pass_controllers(self) -> None:
        """One pass of every controller, now: under ``paused_controllers``, what the cluster shows after exactly
        that pass (a kubelet's post the node lifecycle controller has not seen yet)."""
        self._controllers.sync()

    @contextlib.contextmanager
    def lagging_watch_cache(self, kind: str = "nodes") -> Iterator[None]:
        """Hold the watch cache of ``kind`` behind meanwhile: the reads it serves (``resourceVersion=0``, and a
        version "not older than" without a limit) see the objects as they are now, whatever is written until the
        block ends, as kube-apiserver's cache may lag behind etcd; reads that name no version see the latest state
        (see watch_cache.py)."""
        rt = by_name(kind)
        with self._store.lock:
            self._api.watch_cache.hold(rt, self._store.revision, self._store.items(rt))
        try:
            yield
        finally:
            self._api.watch_cache.catch_up(rt)

    def stop(self) -> None:
        """Stop serving and simulating; re-raises a controller failure that happened while running."""
        if self._loop is not None:
            self._loop.stop()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.close_connections()
            self._httpd.server_close()
        if self._serve_thread is not None:
            self._serve_thread.join()
        if self._tmp is not None:
            self._tmp.cleanup()
        loop, self._loop, self._httpd, self._serve_thread, self._tmp = self._loop, None, None, None, None
        if loop is not None:
            loop.check()

    def __enter__(self) -> KubeServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # --- connection facts ---------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the server is not started")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"{'https' if self._tls else 'http'}://{self._host}:{self.port}"

    @property
    def ca_pem(self) -> bytes:
        """The CA certificate (PEM) that signed the server certificate, as eks:DescribeCluster returns it."""
        if self._certificate is None:
            raise RuntimeError("no CA: the server is not started, or serves plain HTTP")
        return self._certificate.ca_pem

    @property
    def ca_file(self) -> Path:
        """The CA certificate as a file, valid while the server runs (for ``ssl_ca_cert`` and the like)."""
        if self._tmp is None or self._certificate is None:
            raise RuntimeError("no CA: the server is not started, or serves plain HTTP")
        return Path(self._tmp.name, "ca.crt")

    def token(self, access_key: str = ADMIN_ACCESS_KEY) -> str:
        """A fresh EKS-form bearer token signed with ``access_key`` (by default the cluster creator's)."""
        return make_eks_token(self.cluster_name, access_key=access_key)

    def api_client(self, access_key: str = ADMIN_ACCESS_KEY) -> ApiClient:
        """An official-client ``ApiClient`` for this server (a connection pool of its own), configured as the
        product configures its own: the CA and an EKS-form bearer token signed with ``access_key`` (the
        cluster creator's by default; a key given to ``map_role`` acts as that role)."""
        from kubernetes.client import ApiClient, Configuration

        config = Configuration(host=self.url)
        config.ssl_ca_cert = str(self.ca_file)
        config.api_key = {"authorization": self.token(access_key)}
        config.api_key_prefix = {"authorization": "Bearer"}
        # a fresh token on each request, as kubectl's exec plugin renews its own: the server refuses one signed
        # more than 15 minutes ago, and a test's client may outlive that
        config.refresh_api_key_hook = lambda cfg: cfg.api_key.update(authorization=self.token(access_key))  # type: ignore[assignment]
        return ApiClient(config)

    def write_kubeconfig(self, path: Path | None = None) -> Path:
        """A kubeconfig for kubectl with the CA and a fresh EKS-form token; by default in the server's temp dir."""
        if self._tmp is None:
            raise RuntimeError("the server is not started")
        target = path or Path(self._tmp.name, "kubeconfig")
        return write_kubeconfig(
            target, self.url, self.token(), ca_pem=self._certificate.ca_pem if self._certificate else None
        )

    # --- cluster set-up -----------------------------------------------------------------------------

    def seed(self, source: Mapping[str, Any] | str | Path) -> None:
        """Create what a seed document describes (see ``nodecycle_sandbox.kube.seed``), atomically."""
        plan = load_seed(source)
        with self._store.lock:
            for namespace in plan.namespaces:
                if self._store.get(NAMESPACES, "", namespace) is None:
                    self._api.create(NAMESPACES, "", {"metadata": {"name": namespace}}, source=SANDBOX)
            for node in plan.nodes:
                self.add_node(
                    node.name,
                    instance_id=node.instance_id,
                    zone=node.zone,
                    ready=node.ready,
                    labels=node.labels,
                    pods_capacity=node.pods_capacity,
                )
                for static in node.static_pods:
                    self._controllers.add_static_pod(node.name, static)
            # (a seed is a cluster as it runs: its nodes registered long ago, their not-ready taint lifted once the
            # node lifecycle controller saw them Ready, not a registration in progress)
            self._controllers.sync_ready_taints()
            for rt, obj in plan.objects:
                self._api.create(rt, obj["metadata"].get("namespace", ""), obj, source=SANDBOX)

    def apply(self, manifest: str | Path) -> None:
        """What ``kubectl apply -f`` of ``deploy/rbac.yaml`` does: its Roles, ClusterRoles and bindings are
        created or replaced (and take effect at once); its namespaces and ConfigMaps are created if missing."""
        text = manifest.read_text() if isinstance(manifest, Path) else manifest
        with self._store.lock:
            for obj in load_manifest(text):
                rt = by_name(str(obj["kind"]))
                namespace = str(obj["metadata"].get("namespace") or "") if rt.namespaced else ""
                name = obj["metadata"]["name"]
                current = self._store.get(rt, namespace, name)
                if current is None:
                    self._api.create(rt, namespace, json_copy(dict(obj)), source=SANDBOX)
                elif rt in RBAC_TYPES:
                    body = json_copy(dict(obj))
                    body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                    self._api.update(rt, namespace, name, body, source=SANDBOX)

    def _rbac_changed(self, rt: ResourceType) -> None:
        # The authorizer judges by the stored objects, however they were written (apply, the API, a test).
        if rt in RBAC_TYPES:
            self.rbac.replace([obj for kind in RBAC_TYPES for obj in self._store.items(kind)])

    def map_role(self, access_key: str, role_arn: str, session_name: str) -> None:
        """STS's side: ``access_key`` is a session of ``role_arn`` (see ``add_access_entries``)."""
        self.access.add_role_key(access_key, role_arn, session_name)

    def add_access_entries(self, entries: list[AccessEntry]) -> None:
        """EKS access entries: a role's sessions get these Kubernetes groups."""
        self.access.add_access_entries(entries)

    def load_default_seed(self) -> None:
        """6 nodes over 3 zones of eu-west-1, Deployments under PodDisruptionBudgets, two DaemonSets."""
        self.seed(default_seed())

    def add_node(
        self,
        name: str,
        *,
        instance_id: str,
        zone: str,
        ready: bool = True,
        ready_after: float | None = None,
        labels: dict[str, str] | None = None,
        pods_capacity: int = 110,
    ) -> JsonObj:
        """Register a node as a kubelet would, with its Lease. With ``ready_after`` it registers NotReady and
        turns Ready that many seconds later (a launching instance). Registered tainted not-ready (NoSchedule), as
        the API server taints every node created, until the controllers' next pass sees it Ready."""
        node = node_object(
            name,
            instance_id=instance_id,
            zone=zone,
            ready=ready and ready_after is None,
            labels=labels,
            pods_capacity=pods_capacity,
            now=time.time(),
        )
        with self._store.lock:
            created = self._api.create(NODES, "", node, source=SANDBOX)
            self._kubelet.renew_lease(name)
            if ready_after is not None:
                self._controllers.make_ready_after(name, ready_after)
            return json_copy(created)

    def add_static_pod(
        self,
        node: str,
        name: str,
        *,
        namespace: str = "kube-system",
        image: str = "registry.k8s.io/pause:3.10",
    ) -> None:
        """A kubelet static pod on ``node``; its mirror pod (``<name>-<node>``) appears in the API."""
        with self._store.lock:
            if self._store.get(NODES, "", node) is None:
                raise LookupError(f"no node {node!r}")
            self._controllers.add_static_pod(node, StaticPod(name, namespace, image))

    def kill_kubelet(self, name: str, *, grace_seconds: float | None = None) -> None:
        """The node's kubelet is gone (the instance died or stopped, or the kubelet did): its pods neither start
        nor finish terminating, its Lease is renewed no more; after ``grace_seconds`` (default: the server's node monitor grace period) the node
        is Ready=Unknown with the unreachable taints. A graceful pod deletion then never completes: only a
        force delete (grace 0) or the deletion of the node object (pod garbage collection) ends its pods."""
        grace = self._node_monitor_grace if grace_seconds is None else grace_seconds
        self._controllers.kill_kubelet(name, grace)
        self._poke()

    def hang_runtime(self, name: str, *, hung: bool = True) -> None:
        """The node's container runtime hangs (or, ``hung`` False, answers again): its kubelet still renews the
        node's Lease, but starts and stops none of its pods (a delete with grace 0 is the API server's, which marks
        a pod with finalizers (deletionGracePeriodSeconds 0) or removes one without); ``pleg_threshold_seconds``
        later it posts the node Ready=False ("PLEG is not healthy"), then tainted not-ready, its pods evicted
        by the taint manager once their toleration is over (and left Terminating). Answering again, the node is
        Ready at once."""
        self._controllers.hang_runtime(name, hung)
        self._poke()

    def contend_budget(self, namespace: str, name: str, *, contended: bool = True) -> None:
        """Other writers keep updating the PodDisruptionBudget (or, ``contended`` False, no longer do): many
        evictions at once under it (several drains, several stacks), the disruption controller's status writes.
        Each eviction it would allow meets a conflict at its status write, at every one of the eviction handler's
        tries, and is answered that write's last conflict, 409 on the poddisruptionbudgets.policy object, no
        Retry-After, about 10 s late (see eviction.CONFLICT_RETRIES); an eviction it has no room for is still answered
        429 at once."""
        with self._store.lock:
            if contended:
                self._store.contended_budgets.add((namespace, name))
            else:
                self._store.contended_budgets.discard((namespace, name))

    def set_boot_status_lag(self, seconds: float, *, node: str | None = None) -> None:
        """How long after its instance booted (a reboot, a start) a kubelet first posts its node's status (Ready,
        the new boot's bootID), its Lease renewed meanwhile, as a real kubelet's may be (see
        Controllers.boot_status_lag). 0, the default: both at once. ``node``: that node's kubelet only (over the
        lag of all), so that one sandbox's refresh meets nodes with and without the lag. A late first status says
        NotReady, its network plugin not ready yet, and Ready a moment later (Controllers.boot_network_lag)."""
        if seconds < 0:
            raise ValueError(f"boot status lag must not be negative, got {seconds}")
        if node is None:
            self._controllers.boot_status_lag = seconds
        else:
            self._controllers.boot_status_lags[node] = seconds
        self._poke()

    def set_kubelet_clock_offset(self, seconds: float, *, node: str) -> None:
        """How far the clock of ``node``'s kubelet runs ahead of the sandbox's (negative: behind), in the stamps it
        writes: its Lease's renewTime, its node conditions' lastHeartbeatTime (see Kubelet.clock_offsets)."""
        if not math.isfinite(seconds):
            raise ValueError(f"kubelet clock offset must be a finite number of seconds, got {seconds}")
        with self._store.lock:
            self._kubelet.clock_offsets[node] = seconds
        self._poke()

    def set_status_report_seconds(self, seconds: float | None) -> None:
        """How often each live kubelet posts its node's status with nothing changed (a new Ready
        lastHeartbeatTime), as a real one does every nodeStatusReportFrequency (see
        Controllers.status_report_seconds); None: only on a change."""
        if seconds is not None and seconds <= 0:
            raise ValueError(f"status report period must be positive, got {seconds}")
        self._controllers.status_report_seconds = seconds
        self._poke()

    def revive_kubelet(self, name: str) -> None:
        """The kubelet is back: it renews its Lease, the node posts Ready again and its pods' deletions
        proceed."""
        self._controllers.revive_kubelet(name)
        self._poke()

    def instance_stopped(self, name: str) -> bool:
        """The node's instance stopped: its kubelet is gone (see ``kill_kubelet``), and once the node is
        NotReady the cloud provider taints it ``node.cloudprovider.kubernetes.io/shutdown``, keeping the node
        object. False when there is no such node (an instance whose kubelet never registered)."""
        found = self._controllers.instance_stopped(name, self._node_monitor_grace)
        self._poke()
        return found

    def instance_terminated(self, name: str) -> bool:
        """The node's instance is gone, its kubelet with it (see ``kill_kubelet``): the node object stays until
        the cloud provider deletes it (``remove_node``), its pods neither starting nor finishing meanwhile.
        False when there is no such node (an instance whose kubelet never registered)."""
        with self._store.lock:
            if self._store.get(NODES, "", name) is None:
                return False
            self._controllers.kill_kubelet(name, self._node_monitor_grace)
        self._poke()
        return True

    def instance_rebooting(self, name: str) -> bool:
        """The node's instance reboots (its root volume replaced under it): its kubelet is gone, its containers
        with it, until ``instance_started``. EC2 says running all the while, so the cloud provider never taints the
        node as shut down: only the node monitor's unreachable taints come, once its grace is over. False when
        there is no such node (an instance whose kubelet never registered). To the server, as a termination: the
        kubelet gone (what differs comes after, from EC2 and the cloud provider)."""
        return self.instance_terminated(name)

    def instance_started(self, name: str) -> bool:
        """The node's instance runs again: its kubelet posts Ready, and the shutdown taint goes."""
        found = self._controllers.instance_started(name)
        self._poke()
        return found

    def instance_resumed(self, name: str) -> bool:
        """The node's instance resumed from hibernation: the same boot, its kubelet running on where it stopped (see
        Controllers.instance_resumed)."""
        found = self._controllers.instance_resumed(name)
        self._poke()
        return found

    def set_node_ready(self, name: str, ready: bool) -> None:
        """Flip the node's Ready condition; its pods' readiness follows, as the node lifecycle controller does."""
        self._controllers.set_node_ready(name, ready)
        self._poke()

    def _poke(self) -> None:
        """A timer was set without a write: the controller loop must not sleep through it."""
        if self._loop is not None:
            self._loop.poke()

    def remove_node(self, name: str) -> bool:
        """The instance is gone: the cloud provider deletes its node. Its pods stay bound to it until the pod
        garbage collector's quarantine (``pod_gc_quarantine_seconds``) is over: 40 s by default; the
        controllers replace them once they are gone. Returns False when there was no such node (an instance
        whose kubelet never registered)."""
        with self._store.lock:
            if self._store.get(NODES, "", name) is None:
                return False
            self._api.delete(NODES, "", name, {}, source=SANDBOX)
            self._controllers.collect_garbage()
        self._poke()
        return True

    def delete_namespace(self, name: str) -> None:
        """Delete a namespace and everything in it at once (a test's clean-up)."""
        with self._store.lock:
            if self._store.get(NAMESPACES, "", name) is not None:
                namespaces.remove_at_once(self._store, name)

    def replace_config_map_data(self, namespace: str, name: str, data: dict[str, str]) -> None:
        """Replace a ConfigMap's data, as an operator's ``kubectl edit`` would (a test's clean-up)."""
        with self._store.lock:
            current = self._store.get(CONFIGMAPS, namespace, name)
            if current is None:
                raise LookupError(f"no configmap {namespace}/{name}")
            updated = {**json_copy(current), "data": dict(data)}
            self._api.update(CONFIGMAPS, namespace, name, updated, source=SANDBOX)

    def node_for_instance(self, instance_id: str) -> str | None:
        for node in self._store.items(NODES):
            if (node.get("spec") or {}).get("providerID", "").endswith(f"/{instance_id}"):
                return name_of(node)
        return None

    def settle(self, timeout: float = 10.0) -> None:
        """Wait until the controllers have nothing left to do: pods started, terminations finished, replicas
        in place (pods that fit nowhere stay Pending). Not waited for: what a lost kubelet or a hung runtime leads
        to later (its node turning Unknown or NotReady, the taint manager's deletions), nor the pod garbage
        collector's quarantine of a deleted node's pods, which may be minutes away. Raises TimeoutError
        otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            if self._loop is not None:
                self._loop.check()
            result = self._controllers.sync()
            if not result.changed and result.due is None:
                return
            now = time.monotonic()
            if now >= deadline:
                raise TimeoutError(f"the sandbox cluster did not settle within {timeout}s")
            if not result.changed and result.due is not None:
                time.sleep(min(max(0.0, result.due - now), deadline - now, self._tick))

    @property
    def pod_start_seconds(self) -> float:
        """How long a pod takes to become Ready once scheduled; may be changed while running (e.g. to make
        replacements slow after the cluster settled)."""
        return self._kubelet.start_seconds

    @pod_start_seconds.setter
    def pod_start_seconds(self, seconds: float) -> None:
        self._kubelet.start_seconds = seconds

    @property
    def pod_shutdown_seconds(self) -> float:
        """How long a deleted pod takes to stop (capped by its grace period); may be changed while running."""
        return self._kubelet.shutdown_seconds

    @pod_shutdown_seconds.setter
    def pod_shutdown_seconds(self, seconds: float) -> None:
        self._kubelet.shutdown_seconds = seconds

    @property
    def pod_gc_quarantine_seconds(self) -> float:
        """How long the pods of a deleted node linger before podgc force-deletes them; may be changed while
        running (a quarantine that ends now lets the next controller pass collect them)."""
        return self._controllers.pod_gc_quarantine

    @pod_gc_quarantine_seconds.setter
    def pod_gc_quarantine_seconds(self, seconds: float) -> None:
        self._controllers.pod_gc_quarantine = seconds
        self._poke()

    @property
    def pleg_threshold_seconds(self) -> float:
        """How long a hung container runtime goes before its kubelet posts the node Ready=False; may be changed
        while running (counted from when the runtime hung)."""
        return self._kubelet.pleg_threshold_seconds

    @pleg_threshold_seconds.setter
    def pleg_threshold_seconds(self, seconds: float) -> None:
        self._kubelet.pleg_threshold_seconds = seconds
        self._poke()

    @property
    def namespace_controller_lag_seconds(self) -> float:
        """How long the namespace controller takes to get to a deleted namespace; may be changed while running
        (a lag that ends now lets the next controller pass empty the namespaces being deleted)."""
        return self._api.namespace_lag

    @namespace_controller_lag_seconds.setter
    def namespace_controller_lag_seconds(self, seconds: float) -> None:
        self._api.namespace_lag = seconds
        self._poke()

    # --- observation --------------------------------------------------------------------------------

    def counters(self) -> dict[tuple[str, str], int]:
        """API requests so far by (verb, resource); verbs get, list, create, update, patch, delete."""
        return self._counters.snapshot()

    def bytes_sent(self) -> dict[tuple[str, str], int]:
        """Response body bytes written so far by (verb, resource), as ``counters`` counts requests."""
        return self._counters.bytes_sent()

    def bytes_received(self) -> dict[tuple[str, str], int]:
        """Request body bytes received so far by (verb, resource)."""
        return self._counters.bytes_received()

    def connections_opened(self) -> int:
        """Connections the server has accepted since it started: a client that reads each answer whole sends its
        next request on the same one (HTTP/1.1 keep-alive); one that leaves an answer unread opens another, a TCP
        and a TLS handshake each with a real API server."""
        return 0 if self._httpd is None else self._httpd.accepted

    def drop_idle_flows(self, how: str = "reset") -> int:
        """The load balancer before the API server (EKS's Network Load Balancer) forgets every connection idle now,
        as its idle timeout (350 s) does: the client is not told, and its next request on one never reaches the
        API server; it meets a reset (``how="reset"``), or no answer until it gives up (``"blackhole"``). What a
        Lambda container frozen between invocations for minutes meets at its first call. How many it forgot."""
        assert self._httpd is not None, "the server is not started"
        return self._httpd.drop_idle_flows(how)

    def reset_counters(self) -> None:
        """Start the request and byte counts over."""
        self._counters.reset()

    def history(self) -> list[HistoryEntry]:
        return self._store.history()

    def reset_history(self) -> None:
        self._store.reset_history()

    def compact(self) -> None:
        """etcd compacts its history (kube-apiserver asks for it every 5 minutes): a paged list begun before is
        refused its next page (410 Expired), and must start over."""
        self._store.compact()

    def objects(self, kind: str, namespace: str | None = None) -> list[JsonObj]:
        """A copy of every object of ``kind`` (``"pods"``, ``"Node"``, ``"deploy"``...), sorted by namespace/name."""
        return [json_copy(o) for o in self._store.items(by_name(kind), namespace)]

    def get_object(self, kind: str, name: str, namespace: str = "") -> JsonObj | None:
        obj = self._store.get(by_name(kind), namespace, name)
        return None if obj is None else json_copy(obj)
