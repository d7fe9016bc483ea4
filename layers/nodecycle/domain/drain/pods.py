"""Which pods a drain evicts, and with what grace period.

Like ``kubectl drain --ignore-daemonsets --delete-emptydir-data --force``: DaemonSet pods stay (their
controller would put them straight back, and they serve the node until it is gone) and mirror pods stay
(the kubelet owns them). Everything else goes, including pods with emptyDir data and pods without a
controller: the node itself is about to disappear, so keeping them would only lose them later, abruptly.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from nodecycle.domain.ports.cluster import PodInfo

DEFAULT_GRACE = 30  # Kubernetes' default terminationGracePeriodSeconds


def drainable(pod: PodInfo) -> bool:
    return pod.controller_kind != "DaemonSet" and not pod.mirror


def remaining(pods: list[PodInfo]) -> list[PodInfo]:
    """The pods the drain still waits for: every drainable pod still bound to the node."""
    return [pod for pod in pods if drainable(pod)]


def to_evict(pods: list[PodInfo]) -> list[PodInfo]:
    """The pods to ask to leave now: those not already on their way out."""
    return [pod for pod in remaining(pods) if not pod.terminating]


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
