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


def test_a_pod_whose_deletion_the_force_shortened_is_given_the_force_grace_from_the_force() -> None:
    # Given a pod a rollout deleted with its own 600 s grace 100 s before the drain's timeout, its node's kubelet
    # still stopping it (its preStop hook running), and a drain whose force grace is 30 s
    late = T0 + timedelta(seconds=600)
    asked = late - timedelta(seconds=100)
    rolled = pod("web-1", grace_period=600, deletion_at=asked + timedelta(seconds=600), deletion_grace=600)
    cluster = FakeCluster(nodes={NODE: node()}, pods=[rolled], now=late)
    step = evict(cluster, force_grace_seconds="30")

    # When the force deletes it again with its grace at the timeout: the API server counts the shorter grace from
    # the first request (its deadline 70 s past), while the kubelet stops the pod with it from when it sees it,
    # SIGKILL 30 s after the force (kubelet pod workers: a shorter grace restarts the kill)
    record, at, ended_at = polled(), late, None
    while at <= late + timedelta(seconds=120):
        cluster.now = at
        outcome = step(record, at)
        record = record.model_copy(update=dict(outcome.changes))
        if not outcome.again:
            ended_at = at
            break
        at += timedelta(seconds=max(outcome.delay, 1))

    # Then the drain forced it, and leaves it no sooner than its force grace from the force (the instance then
    # terminated with it still stopping: invariant 2), nor later than the grace and invariant 10's margin
    assert cluster.deletions == [("web-1", 30)]
    assert cluster.pods[0].deletion_at == asked + timedelta(seconds=30)
    assert ended_at is not None
    assert late + timedelta(seconds=30) <= ended_at <= late + timedelta(seconds=30 + 20), ended_at - late
    assert record.outcome == "drain-timeout-forced; 1 pods left terminating (past their deletion deadline)"


def test_at_the_timeout_pods_long_past_their_deadline_and_pods_with_no_grace_left_are_left_together() -> None:
    # Given, at the drain's timeout (before its policy acts), a pod an operator force-deleted (grace 0) that a
    # finalizer keeps, and one whose deadline passed more than a minute ago (its container runtime hung)
    late = T0 + timedelta(seconds=600)
    kept = pod("web-1", grace_period=0, deletion_at=late - timedelta(seconds=1), deletion_grace=0)
    hung = pod("web-2", deletion_at=late - timedelta(seconds=61), deletion_grace=30)
    cluster = FakeCluster(nodes={NODE: node()}, pods=[kept, hung], now=late)

    # When the drain looks at its deadline
    outcome = evict(cluster)(polled(), late)

    # Then it leaves both, saying why of each kind, and deletes neither (nothing is left to force)
    assert outcome.changes["outcome"] == (
        "drained; 2 pods left terminating "
        "(past their deletion deadline, or deleted with no grace left and kept by finalizers)"
    )
    assert cluster.deletions == []


def test_pods_the_force_deleted_a_moment_late_are_looked_at_again_when_given_up_not_a_poll_later() -> None:
    # Given a drain that polls every 300 s at its timeout, whose pod's container runtime hangs, and an API server
    # that stamps the force's delete 2 s after the drain's now (its answer slow, or its clock within the 2 s no
    # Date can tell from none)
    late = T0 + timedelta(seconds=600)
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("web-1")], now=late + timedelta(seconds=2))
    step = evict(cluster, drain_poll_seconds="300", budget_holder_ttl_seconds="1200")

    # When the drain runs at its own delays from its timeout, the force deleting the pod (grace 5 s)
    record, at, ended_at = polled(), late, None
    while at <= late + timedelta(seconds=600):
        outcome = step(record, at)
        record = record.model_copy(update=dict(outcome.changes))
        if not outcome.again:
            ended_at = at
            break
        at += timedelta(seconds=max(outcome.delay, 1))

    # Then it leaves the pod FORCED_STOP_SLACK past its deadline, not a poll (300 s) later: invariant 10
    assert cluster.deletions == [("web-1", 5)]
    assert ended_at is not None
    assert ended_at <= late + timedelta(seconds=5 + 20), ended_at - late
