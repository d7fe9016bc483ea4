"""In-memory Kubernetes API server for the nodecycle sandbox; the official client and kubectl work against it.

    from nodecycle_sandbox.kube import KubeServer

    with KubeServer(tls=True, tick_seconds=0.05) as server:   # 127.0.0.1, a free port
        server.load_default_seed()                            # or server.seed(dict | path)
        server.settle()                                       # pods scheduled and Ready
        server.url, server.ca_pem, server.token()             # what eks:DescribeCluster + get-token give
        server.write_kubeconfig()                             # for kubectl
        server.counters(), server.bytes_sent(), server.history(), server.objects("pods")

Authentication and authorization as on EKS: an EKS token's access key maps to an identity (``access``),
whose requests RBAC judges (``rbac``, with the manifests given to ``server.apply``); 401 and 403 with the
real Status bodies; access reviews for ``kubectl auth can-i``. Validating admission webhooks that deny writes
(``admission``), as a test registers them.

Served: core/v1 namespaces, nodes (+status), pods (+status, +eviction), configmaps; apps/v1 deployments,
replicasets, daemonsets; policy/v1 poddisruptionbudgets; coordination.k8s.io/v1 leases; rbac.authorization.k8s.io/v1
roles, rolebindings, clusterroles, clusterrolebindings; metadata-only and Table representations of reads,
resourceVersion=0 reads. Not served: watch, dryRun, server-side apply, deletecollection, scale subresources,
protobuf bodies. Finalizers are honoured: an object that has them is only marked for deletion until an
update removes the last one.
"""

from nodecycle_sandbox.kube.auth import make_eks_token
from nodecycle_sandbox.kube.history import HistoryEntry, max_unschedulable
from nodecycle_sandbox.kube.meta import SHUTDOWN_ANNOTATION, START_ANNOTATION, ZONE_LABEL
from nodecycle_sandbox.kube.server import KubeServer

__all__ = [
    "SHUTDOWN_ANNOTATION",
    "START_ANNOTATION",
    "ZONE_LABEL",
    "HistoryEntry",
    "KubeServer",
    "make_eks_token",
    "max_unschedulable",
]
