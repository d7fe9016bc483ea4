"""Pods past the drain's timeout that only their finalizers keep: what the drain knows of them. A delete with
grace 0 (the force policy's, for a pod whose own grace is 0; an operator's kubectl delete --force) has the API
server set deletionGracePeriodSeconds 0 at once, before any kubelet acts, exactly as the kubelet's final delete
of a pod it stopped does: the field says no grace is left, not that nothing runs."""

from __future__ import annotations

from datetime import timedelta

from tests.support.fakes import T0
from tests.unit.drain.test_drain_steps import NODE, FakeCluster, draining, evict, node, pod, polled


def test_a_pod_deleted_with_no_grace_is_left_without_being_called_stopped() -> None:
    # Given a drain forced at its timeout, whose pod (terminationGracePeriodSeconds 0, a finalizer nobody
    # removes) the force deleted with grace 0 a second ago: the API server answered deletionGracePeriodSeconds 0,
    # and its kubelet has not acted yet (or its container runtime hangs)
    late = T0 + timedelta(seconds=600)
    kept = pod("web-1", grace_period=0, deletion_at=late, deletion_grace=0)
    cluster = FakeCluster(nodes={NODE: node()}, pods=[kept], now=late)

    # When the drain looks again a second later
    outcome = evict(cluster)(draining(forced_at=late), late + timedelta(seconds=1))

    # Then it leaves it (no grace is owed to it: the instance's end takes nothing the delete did not), and says
    # what it knows: deleted with no grace left, not stopped
    assert outcome.changes["outcome"] == (
        "drain-timeout-forced; 1 pods left terminating (deleted with no grace left, kept by finalizers)"
    )


def test_pods_the_force_deleted_are_waited_for_a_few_seconds_past_their_grace_whatever_the_poll_interval() -> (
    None
):
    # Given a drain that polls every 300 s, forced at its timeout, whose pod (grace 5 s) the force deleted: its
    # node is Ready (its kubelet renews its Lease) but its container runtime hangs, so it never stops
    late = T0 + timedelta(seconds=600)
    hung = pod("web-1", deletion_at=late + timedelta(seconds=5), deletion_grace=5)
    cluster = FakeCluster(nodes={NODE: node()}, pods=[hung], now=late)
    step = evict(cluster, drain_poll_seconds="300", budget_holder_ttl_seconds="1200")

    # When the drain looks again right after the force, Then it is back soon after the force grace, not a poll
    # later
    record = polled(forced_at=late)
    first = step(record, late + timedelta(seconds=1))
    assert first.again
    assert first.delay <= 5 + 10 + 1, first.delay

    # and then it leaves the pod, its grace over: nothing owed to it, no slot held a minute for it (invariant 10)
    at = late + timedelta(seconds=1 + first.delay)
    outcome = step(record.model_copy(update=dict(first.changes)), at)
    assert outcome.changes["outcome"] == (
        "drain-timeout-forced; 1 pods left terminating (past their deletion deadline)"
    )
    assert at <= late + timedelta(seconds=5 + 20)
