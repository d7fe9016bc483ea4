"""The node object of an instance deleted while the instance runs, and the pods still bound to its name.

``kubectl delete node`` (or a tool that deletes Node objects) removes the object, not the instance, its kubelet nor
its pods. They stay bound to the node's name (``spec.nodeName``), running: the kubelet watches its pods by that name
and goes on serving them, and it does not register its node again while it runs (registration is done once per
kubelet process: kubernetes/kubernetes#71398). Only the pod garbage collector ends them, once its quarantine is over
(40 s), all at once, force-deleted with no grace whatever their PodDisruptionBudgets say (kube-controller-manager,
pkg/controller/podgc, gcOrphaned). An action completed meanwhile terminates the instance under them. So the drain
takes them as its node's pods: a slot for the name, no cordon (nothing is left to cordon), and their evictions, as a
drain whose node is deleted under it does (see ``Evict._node_deleted``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from nodecycle.domain.drain import pods as podfilter
from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.ports.cluster import Cluster, NodeInfo, PodInfo

# record.extra key: when the cordon found the drain's node deleted, pods still bound to its name, and went on to their
# evictions without a claim. A node registered again under the name (its kubelet restarted) carries no claim of the
# drain, and no uid the drain knew to tell it by: the eviction's poll sends it to the cordon, which claims it.
NOTHING_CORDONED = "node_deleted_at_cordon"


def holding(pods: list[PodInfo], now: datetime) -> list[PodInfo]:
    """Those of ``pods``, bound to the name of a node that is gone, that hold a drain: those to ask to leave, and
    those on their way out within their deletion's grace (the live kubelet of a running instance is stopping
    them). One past its deletion's deadline is not among them: with no kubelet, none stops it (the pod garbage
    collector ends it); with its deletion shortened by someone else, its kubelet may still be (see :func:`overdue`)."""
    left = podfilter.remaining(pods)
    asked = podfilter.to_evict(left)
    return [pod for pod in left if pod in asked or (pod.deletion_at is not None and now < pod.deletion_at)]


def overdue(pods: list[PodInfo], now: datetime) -> list[PodInfo]:
    """Those of ``pods``, bound to the name of a node that is gone, past their deletion's deadline with grace left
    (deletionGracePeriodSeconds above 0: their kubelet has not finished them). :func:`holding` leaves them out, but
    one whose deletion someone else shortened may still be stopping: kube-apiserver counts a shortened deletion's
    deadline from the first delete (rest.BeforeDelete), while the kubelet kills the pod with the shorter grace from
    when it sees it. The drain waits that grace from when it first saw it so (see drain/evict.py, ORPHANS_DELETING)."""
    return [
        pod
        for pod in podfilter.remaining(pods)
        if pod.deletion_at is not None and pod.deletion_at <= now and pod.deletion_grace
    ]


def still_bound(pods: list[PodInfo], now: datetime) -> bool:
    """Whether ``pods``, those bound to the name of a node that is gone, hold a drain: some to ask to leave or on
    their way out (see :func:`holding`), or past their deadline and maybe still stopping (see :func:`overdue`)."""
    return bool(holding(pods, now) or overdue(pods, now))


def deleted_node(
    cluster: Cluster, record: LifecycleRecord, names: Iterable[object], now: datetime
) -> NodeInfo | None:
    """The record's instance's node, deleted while the instance runs, as its pods still know it: the first of
    ``names`` (those the instance's node went by, as far as known: the record's, the instance's DNS name; None or
    anything but a name is skipped) that no node has now, to which pods the drain would evict or wait for are still
    bound. Nothing of it is left but its name: no uid, no owner, no claim, no cordon; and the zone the record knew
    it by (None: unknown, counted by the budget against every zone). None when no such name holds pods: nothing to
    drain."""
    for name in dict.fromkeys(name for name in names if isinstance(name, str) and name):
        if cluster.node_version(name) is not None:
            continue  # (a node has the name: the instance's own, found otherwise, or another instance's now)
        if still_bound(cluster.pods_on(name), now):
            return NodeInfo(
                name=name,
                instance_id=record.instance_id,
                zone=record.zone,
                ready=False,
                owner=None,
                in_progress=None,
                resource_version="",
            )
    return None
