"""Which pods a drain evicts, and with what grace period.

Like ``kubectl drain --ignore-daemonsets --delete-emptydir-data --force``: DaemonSet pods stay (their
controller would put them straight back, and they serve the node until it is gone) and mirror pods stay
(the kubelet owns them). Everything else goes, including pods with emptyDir data and pods without a
controller: the node itself is about to disappear, so keeping them would only lose them later, abruptly.

And like kubectl drain (k8s.io/kubectl/pkg/drain, which aws-node-termination-handler uses too), which lists the pods
once at its start and waits for those by uid: the drain is about the pods that were on the node when it was
cordoned. A pod placed there after the cordon (its creation later than the cordon, on the API server's clock) is
left alone: neither evicted nor waited for, nor deleted by the timeout policy, only told (see :class:`Cordoned`).
Such a pod tolerates the node.kubernetes.io/unschedulable taint (a toleration of every taint, ``{operator: Exists}``,
as some agents and operators ship), or was bound by ``spec.nodeName`` past the scheduler: either way its owner put
it on a cordoned node. Evicted, it is only replaced there again (the emptying node scores best), each replacement
another pod to evict: waited for, that loop held every such drain to its timeout and its force policy; evicted once
each and not waited for, it would still restart the pod at every poll for nothing. It stops with its instance, and its
controller places it elsewhere once the node is gone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from nodecycle.domain.ports.cluster import NodeInfo, PodInfo

DEFAULT_GRACE = 30  # Kubernetes' default terminationGracePeriodSeconds
# How much later than its node's cordon (the unschedulable taint's timeAdded) a pod must have been created to be
# taken for one placed there after it. No clock of the drain's is in the comparison (a function's clock may run a
# minute off the API server's: see adapters/kube/server_clock.py): both stamps are the control plane's. But not one
# clock's: the taint is stamped by kube-controller-manager when it sees the cordon, a pod's creation by whichever
# kube-apiserver took it (an HA control plane runs several, on hosts NTP keeps close, not equal); and the scheduler
# sees the cordon through its own watch, possibly a moment after the controller did, so a pod created in that moment
# without the toleration may still be bound to the node. Both stamps are whole seconds (truncated). The margin is on
# the side of waiting: a pod created within it is evicted and waited for as any (a pod there before the cordon is
# never left alone); a newcomer within it costs a few more turns of the loop this ends.
PLACED_AFTER_MARGIN = timedelta(seconds=5)
# record.extra key: the latest creation (an RFC 3339 time of the API server's, or None: no pod) among the drainable
# pods on the node when the drain first listed them. Those are the drain's whatever the cordon's time says: a node
# cordoned earlier by someone else (an operator, a rebalance recommendation's cordon) has its taint stamped then,
# and the pods placed there since are there at the drain's start, which kubectl drain would evict and wait for too.
FIRST_LISTED = "first_listed_created"
# record.extra key: the uids of the pods on the node told placed after its cordon (counted and told once per drain)
PLACED_AFTER = "placed_after_cordon"


@dataclass(frozen=True)
class Cordoned:
    """When the node was cordoned, as far as the pods on it can be told apart by it: ``at`` the unschedulable
    taint's timeAdded (None: the node is not cordoned, or its taint has no time yet: the node lifecycle controller
    sets it moments after the cordon, in every cluster since TaintNodesByCondition; without it every pod is waited
    for, as before), ``first_listed`` the latest creation among the pods there at the drain's first list
    (FIRST_LISTED). Both on the API server's clock. A pod created before the cordon and bound to the node after it
    (Pending when the drain began, or being bound) was created before it: waited for. One recreated with a name
    of one there before (a StatefulSet's) is a new pod, with a new uid and creation: placed after."""

    at: datetime | None
    first_listed: datetime | None = None

    @classmethod
    def of(cls, node: NodeInfo, extra: Mapping[str, Any]) -> Cordoned:
        """As the node read and the record (``extra``, FIRST_LISTED) tell it. A taint still there on a node no longer
        cordoned (its controller not yet past it) tells of no cordon."""
        at = node.cordoned_at if node.unschedulable else None
        listed = extra.get(FIRST_LISTED)
        try:
            return cls(at, datetime.fromisoformat(listed) if isinstance(listed, str) else None)
        except ValueError:  # (unreadable: no cordon time either, every pod waited for)
            return cls(None)

    def placed_after(self, pod: PodInfo) -> bool:
        """Whether ``pod`` was placed on the node after its cordon (see the module's docstring): created later
        than the cordon by PLACED_AFTER_MARGIN, and than every pod there at the drain's first list."""
        if self.at is None or pod.created_at is None:
            return False
        since = self.at + PLACED_AFTER_MARGIN
        if self.first_listed is not None:
            since = max(since, self.first_listed)
        return pod.created_at > since


def first_listed(extra: Mapping[str, Any], pods: Iterable[PodInfo]) -> dict[str, Any]:
    """``extra`` noting FIRST_LISTED from ``pods``, the node's pods as a poll listed them, unless a list before
    noted it: state of the record, so that a drain retried from its message (its function's container gone)
    tells the pods apart as the run before did. The latest creation is noted rather than their uids: a handful of
    bytes, whatever the pods."""
    if FIRST_LISTED in extra:
        return dict(extra)
    created = [pod.created_at for pod in pods if drainable(pod) and pod.created_at is not None]
    return {**extra, FIRST_LISTED: max(created).isoformat() if created else None}


def relisted(extra: Mapping[str, Any]) -> dict[str, Any]:
    """``extra`` without FIRST_LISTED: the drain's cordon was undone and is done again, and the pods placed on the
    node meanwhile (without the toleration) are the drain's too: the next list notes them. (The taint's time says so
    too once its controller has lifted it and stamped it again, unless the cordon came back before it looked.)"""
    return {key: value for key, value in extra.items() if key != FIRST_LISTED}


def drainable(pod: PodInfo) -> bool:
    return pod.controller_kind != "DaemonSet" and not pod.mirror


def remaining(pods: list[PodInfo], cordoned: Cordoned | None = None) -> list[PodInfo]:
    """The pods the drain still waits for: every drainable pod still bound to the node, but those placed there
    after its cordon (``cordoned``; None: not known, none)."""
    return [pod for pod in pods if drainable(pod) and not (cordoned and cordoned.placed_after(pod))]


def to_evict(pods: list[PodInfo], cordoned: Cordoned | None = None) -> list[PodInfo]:
    """The pods to ask to leave now: those the drain waits for (see :func:`remaining`) not already on their way
    out."""
    return [pod for pod in remaining(pods, cordoned) if not pod.terminating]


def placed_after(pods: list[PodInfo], cordoned: Cordoned) -> list[PodInfo]:
    """The drainable pods of ``pods`` placed on the node after its cordon: left alone (see the module's docstring)."""
    return [pod for pod in pods if drainable(pod) and cordoned.placed_after(pod)]


def untold(placed: list[PodInfo], extra: Mapping[str, Any]) -> tuple[list[PodInfo], dict[str, Any]]:
    """The pods of ``placed`` not told before in this drain, and ``extra`` noting them all told (PLACED_AFTER: only
    the pods still on the node, so that the note does not grow with pods long gone)."""
    told = extra.get(PLACED_AFTER)
    before = set(told) if isinstance(told, list) else set()
    new = [pod for pod in placed if pod.uid not in before]
    kept = {key: value for key, value in extra.items() if key != PLACED_AFTER}
    if placed:
        kept[PLACED_AFTER] = sorted(pod.uid for pod in placed)
    return new, kept


def outlasting(pods: list[PodInfo], cap: int, now: datetime) -> list[PodInfo]:
    """The pods of ``pods`` whose deletion in progress ends later than one asked now with the grace ``cap``
    allows them would: deleted by someone else with a longer grace of their own (a rollout, an operator). Asked
    again, the API server shortens their deletion (it never extends one); left alone, they would hold the drain
    and the force policy to their own grace."""
    return [pod for pod in pods if _outlasts(pod, grace_for(pod, cap), now)]


def _outlasts(pod: PodInfo, grace: int, now: datetime) -> bool:
    if pod.deletion_at is None or pod.deletion_grace is None:
        return False
    return grace < pod.deletion_grace and pod.deletion_at > now + timedelta(seconds=grace)


def grace_for(pod: PodInfo, cap: int) -> int:
    """The pod's own grace period, never more than the cap."""
    own = pod.grace_period if pod.grace_period is not None else DEFAULT_GRACE
    return max(0, min(own, cap))
