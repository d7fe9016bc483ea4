"""The drain's steps on the real Kubernetes adapter against an API server as unkind as Kubernetes is about nodes
that outlive their instance, or instances that outlive their node: the pods of a deleted node stay bound to it
until the pod garbage collector's quarantine is over (40 s on a real cluster), and only then go, all at once,
force-deleted whatever their PodDisruptionBudgets say."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes.client import CoreV1Api

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.ports.cluster import PodInfo
from nodecycle_sandbox.kube import SHUTDOWN_ANNOTATION, KubeServer
from nodecycle_sandbox.kube.admission import Denial
from tests.integration.kube.test_kube_drain_ending_namespace import delete_namespace
from tests.integration.kube.test_kube_drain_steps import (
    INSTANCE,
    NODE,
    WEBHOOK,
    evict,
    on_its_way_out,
    web_pods,
)
from tests.integration.kube.test_kube_drain_steps import SEED as DRAIN_STEPS_SEED
from tests.support.fakes import FakeMetrics
from tests.unit.drain.test_drain_steps import terminating

QUARANTINE = 600.0  # longer than any test: the orphans stay until a test ends the quarantine
# the drain steps' cluster, its pods' orphans kept (the server and cluster fixtures: conftest.py)
SEED = DRAIN_STEPS_SEED
SERVER_OPTIONS = {"pod_gc_quarantine_seconds": QUARANTINE}


def _evicting(cluster: KubeCluster) -> tuple[LifecycleRecord, datetime]:
    """The record of a drain of NODE whose first pass is over, begun now (its deadline 10 minutes on), and that
    moment."""
    node = cluster.get_node(NODE)
    assert node is not None
    start = datetime.now(UTC)
    record = terminating(
        Step.EVICT,
        id=f"{INSTANCE}/terminate/token",
        instance_id=INSTANCE,
        node=NODE,
        node_uid=node.uid,
        drain_started_at=start,
        drain_deadline=start + timedelta(seconds=600),
        extra={"polls": 1},
    )
    return record, start


def _slow_to_stop(server: KubeServer, pod: PodInfo) -> None:
    """``pod``'s app stops only at its deletion's grace's end (it ignores SIGTERM, or drains long work): the sandbox's
    kubelet otherwise removes a deleted pod at its next look, and the pod a test deletes with a long grace was gone
    before the test's next read on a loaded machine."""
    CoreV1Api(server.api_client()).patch_namespaced_pod(
        pod.name, pod.namespace, {"metadata": {"annotations": {SHUTDOWN_ANNOTATION: "86400"}}}
    )


def _deleted_by_someone_else(server: KubeServer, cluster: KubeCluster, grace: int) -> PodInfo:
    """NODE's first web pod, deleted now with ``grace`` (a rollout, an operator) and slow to stop (see _slow_to_stop):
    as listed after that delete, its deletion's deadline set."""
    slow = web_pods(cluster)[0]
    _slow_to_stop(server, slow)
    cluster.delete_pod(slow, grace)
    return next(p for p in cluster.pods_on(NODE) if p.uid == slow.uid)


def _last_on_its_deleted_node(server: KubeServer, cluster: KubeCluster, grace: int) -> PodInfo:
    """As :func:`_deleted_by_someone_else`, then NODE's object deleted (its instance running) and its other web pods
    stopped by their kubelet: that slow pod is the last one bound to the node's name."""
    slow = _deleted_by_someone_else(server, cluster, grace)
    server.remove_node(NODE)
    for pod in web_pods(cluster):
        if pod.uid != slow.uid:
            cluster.delete_pod(pod, 0)
    return slow


def _evictions_pinned(server: KubeServer, pod: PodInfo) -> None:
    """An admission webhook refuses ``pod``'s evictions (a policy engine's "this pod is not evicted")."""
    server.admission.deny(
        Denial(WEBHOOK, "CREATE", "pods/eviction", "shop", pod.name, 403, "Forbidden", "pinned")
    )


def _podgc_removes_them(server: KubeServer, cluster: KubeCluster) -> None:
    """End podgc's quarantine, and wait (5 s at most) until it has force-deleted NODE's workload pods from the API."""
    server.pod_gc_quarantine_seconds = 0
    for _ in range(100):
        if not any(pod.controller_kind == "ReplicaSet" for pod in cluster.pods_on(NODE)):
            break
        time.sleep(0.05)
    assert not any(pod.controller_kind == "ReplicaSet" for pod in cluster.pods_on(NODE))


def test_a_drain_whose_node_object_is_deleted_under_running_pods_evicts_them_before_it_settles(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain in progress (its first pass over), and its node object deleted while its instance still runs
    # (kubectl delete node): its pods stay bound to the node's name, running, until podgc's quarantine is over
    record, start = _evicting(cluster)
    pods = web_pods(cluster)
    server.remove_node(NODE)
    assert not any(on_its_way_out(server, pod) for pod in pods)

    # When the drain polls
    step = evict(cluster)
    outcome = step(record, start)

    # Then it asks them to leave through the Eviction API (their replacements start elsewhere) and waits for
    # them, rather than completing the action under them: podgc would force-delete them all at once, PDBs or not
    assert all(on_its_way_out(server, pod) for pod in pods)
    assert (outcome.then, outcome.again) == (None, True)

    # When it polls again within their grace, Then it waits: a live kubelet would be stopping them
    record = record.model_copy(update=dict(outcome.changes))
    assert step(record, start + timedelta(seconds=1)).again

    # When it polls once their grace is over, them still there (no kubelet ends them here: podgc will), Then it
    # settles: nothing is left there for it to do
    leaving = [pod.deletion_at for pod in cluster.pods_on(NODE) if pod.controller_kind == "ReplicaSet"]
    assert leaving
    assert None not in leaving
    later = max(at for at in leaving if at is not None) + timedelta(seconds=1)
    settled = step(record, later)
    assert (settled.then, settled.changes["outcome"]) == (Step.COMPLETE, "node-gone")


def test_a_drain_whose_deleted_nodes_pods_are_still_bound_at_its_deadline_applies_its_timeout_policy(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain whose node object was deleted while its instance runs, its pods still bound to the node's name
    # and never asked to leave yet (their evictions refused so far: a PodDisruptionBudget), at its drain deadline
    node = cluster.get_node(NODE)
    assert node is not None
    start = datetime.now(UTC)
    record = terminating(
        Step.EVICT,
        id=f"{INSTANCE}/terminate/token",
        instance_id=INSTANCE,
        node=NODE,
        node_uid=node.uid,
        drain_started_at=start - timedelta(seconds=600),
        drain_deadline=start,
        extra={"polls": 1},
    )
    pods = web_pods(cluster)
    server.remove_node(NODE)
    metrics = FakeMetrics()

    # When the drain polls at its deadline (the force policy, the settings' default)
    outcome = evict(cluster, metrics)(record, start)

    # Then the timeout policy acts as on a node that is there: the pods are deleted (their grace capped) and waited
    # for, the timeout counted; not the action completed at once under them as if nothing were left (node-gone)
    assert (outcome.then, outcome.again) == (None, True), outcome
    assert all(on_its_way_out(server, pod) for pod in pods)
    assert outcome.changes["forced_at"] == start
    assert metrics.counts.get("DrainTimeouts") == 1


def test_a_drain_whose_deleted_nodes_pods_podgc_removed_within_their_grace_waits_out_that_grace(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain whose node object was deleted while its instance runs, its pods asked to leave (their live
    # kubelet stops them within their grace)
    record, start = _evicting(cluster)
    pods = web_pods(cluster)
    server.remove_node(NODE)
    step = evict(cluster)
    outcome = step(record, start)
    assert all(on_its_way_out(server, pod) for pod in pods)
    leaving = [pod.deletion_at for pod in cluster.pods_on(NODE) if pod.controller_kind == "ReplicaSet"]
    assert leaving
    assert None not in leaving
    stopped = max(at for at in leaving if at is not None)

    # When podgc's quarantine ends within their grace: it force-deletes them from the API at once, while their
    # kubelet, which sees them removed, goes on stopping them within that grace (podgc gcOrphaned; the kubelet's
    # HandlePodRemoves kills a removed pod with its grace)
    _podgc_removes_them(server, cluster)

    # Then the drain does not complete the action under them until their grace is over
    record = record.model_copy(update=dict(outcome.changes))
    waiting = step(record, start + timedelta(seconds=1))
    assert (waiting.then, waiting.again) == (None, True), waiting
    assert waiting.delay <= (stopped - start).total_seconds()

    # and once it is over, it settles
    record = record.model_copy(update=dict(waiting.changes))
    settled = step(record, stopped + timedelta(seconds=1))
    assert (settled.then, settled.changes["outcome"]) == (Step.COMPLETE, "node-gone")


def test_a_deleted_nodes_pod_someone_deletes_with_a_longer_grace_is_asked_again_and_waited_out_for_the_drains(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain whose node object was deleted while its instance runs, and one of its pods being deleted by
    # someone else (a rollout, an operator) with a grace of an hour, far past the pod's own and the drain's cap
    record, start = _evicting(cluster)
    slow = _deleted_by_someone_else(server, cluster, 3600)
    server.remove_node(NODE)

    # When the drain polls
    step = evict(cluster)
    outcome = step(record, start)

    # Then it asks that pod again with the drain's grace, as on a node that is there: the API server shortens a
    # deletion in progress (it never extends one), and the pod's kubelet stops it within that grace
    shortened = next(p for p in cluster.pods_on(NODE) if p.uid == slow.uid)
    assert shortened.deletion_at is not None
    assert shortened.deletion_at <= start + timedelta(seconds=121)
    stopped = max(p.deletion_at for p in cluster.pods_on(NODE) if p.deletion_at is not None)

    # When podgc's quarantine ends and it force-deletes them all from the API
    _podgc_removes_them(server, cluster)

    # Then the drain settles once that shortened grace is over, not at its own deadline (the hour's end capped by it)
    record = record.model_copy(update=dict(outcome.changes))
    settled = step(record, stopped + timedelta(seconds=1))
    assert (settled.then, settled.changes.get("outcome")) == (Step.COMPLETE, "node-gone"), settled


def test_a_deleted_nodes_pod_whose_shortening_a_webhook_refuses_is_waited_out_for_its_own_grace_once_podgc_removed_it(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain whose node object was deleted while its instance runs, one of its pods being deleted by someone
    # else with a grace of 15 minutes, past the drain's cap (2 min) and within its deadline (10 min), and an admission
    # webhook that refuses that pod's evictions (a policy engine's "this pod is not evicted")
    record, start = _evicting(cluster)
    slow = _deleted_by_someone_else(server, cluster, 900)
    own = slow.deletion_at
    assert own is not None
    _evictions_pinned(server, slow)
    server.remove_node(NODE)

    # When the drain polls: its eviction of that pod, which would have shortened its deletion, is refused
    step = evict(cluster)
    outcome = step(record, start)
    assert next(p for p in cluster.pods_on(NODE) if p.uid == slow.uid).deletion_at == own

    # When podgc's quarantine ends and it force-deletes them all from the API before the next poll: their live kubelet
    # goes on stopping each with its grace, the slow one's its own 15 minutes
    _podgc_removes_them(server, cluster)

    # Then the drain does not complete the action under that pod once the drain's shorter grace is over: it waits
    # until the pod's own deletion's deadline (within the drain's), as it would have had the pod been listed
    record = record.model_copy(update=dict(outcome.changes))
    waiting = step(record, start + timedelta(seconds=180))
    assert (waiting.then, waiting.again) == (None, True), waiting
    record = record.model_copy(update=dict(waiting.changes))
    settled = step(record, own + timedelta(seconds=1))
    assert (settled.then, settled.changes.get("outcome")) == (Step.COMPLETE, "node-gone"), settled


def test_a_deleted_nodes_pod_whose_shortening_a_later_poll_gets_taken_is_waited_out_for_that_shorter_grace(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain whose node object was deleted while its instance runs, one of its pods being deleted by someone
    # else with a grace of 15 minutes, past the drain's cap and its deadline (10 min), whose eviction a webhook refused
    # at the first poll: noted at its own deletion's deadline
    record, start = _evicting(cluster)
    slow = _deleted_by_someone_else(server, cluster, 900)
    _evictions_pinned(server, slow)
    server.remove_node(NODE)
    step = evict(cluster)
    outcome = step(record, start)
    record = record.model_copy(update=dict(outcome.changes))

    # When the webhook lets it through at the next poll: its eviction, taken, shortens its deletion to the drain's
    # grace (the API server shortens a deletion in progress; its kubelet kills it with the shorter grace from then)
    server.admission.clear()
    again = start + timedelta(seconds=2)
    outcome = step(record, again)
    record = record.model_copy(update=dict(outcome.changes))
    shortened = next(p for p in cluster.pods_on(NODE) if p.uid == slow.uid)
    assert shortened.deletion_grace is not None
    assert shortened.deletion_grace < 900

    # When podgc's quarantine ends and it force-deletes them all from the API
    _podgc_removes_them(server, cluster)

    # Then the drain settles once that shorter grace is over (from the poll that shortened it), not at its deadline
    # for the own grace a refusal once noted: the slot is not held 8 minutes for a pod stopped long before
    stopped = again + timedelta(seconds=shortened.deletion_grace)
    settled = step(record, stopped + timedelta(seconds=1))
    assert (settled.then, settled.changes.get("outcome")) == (Step.COMPLETE, "node-gone"), settled


def test_a_deleted_nodes_pod_of_an_ending_namespace_podgc_removes_before_its_shortening_is_waited_out_for_its_own_grace(
    cluster: KubeCluster, server: KubeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a drain whose node object was deleted while its instance runs, one of its pods being deleted by someone
    # else with a grace of 15 minutes, past the drain's cap (2 min) and within its deadline (10 min), and its namespace
    # being deleted (no eviction taken there: the drain shortens that pod's deletion by a delete of its own)
    record, start = _evicting(cluster)
    slow = _deleted_by_someone_else(server, cluster, 900)
    own = slow.deletion_at
    assert own is not None
    delete_namespace(server, slow.namespace)
    server.remove_node(NODE)

    # When podgc's quarantine ends between the drain's list and that delete: the pods are removed from the API (their
    # live kubelet goes on stopping each with its grace, the slow one's its own 15 minutes), the delete answers 404
    real = cluster.delete_pod
    answers: list[bool] = []

    def removed_first(pod: PodInfo, grace: int) -> bool:
        _podgc_removes_them(server, cluster)
        answers.append(real(pod, grace))
        return answers[-1]

    monkeypatch.setattr(cluster, "delete_pod", removed_first)
    step = evict(cluster)
    outcome = step(record, start)
    assert answers == [False]  # (gone: nothing shortened)

    # Then the drain does not complete the action under that pod once the drain's shorter grace is over: it waits
    # until the pod's own deletion's deadline (within the drain's)
    record = record.model_copy(update=dict(outcome.changes))
    waiting = step(record, start + timedelta(seconds=180))
    assert (waiting.then, waiting.again) == (None, True), waiting
    record = record.model_copy(update=dict(waiting.changes))
    settled = step(record, own + timedelta(seconds=1))
    assert (settled.then, settled.changes.get("outcome")) == (Step.COMPLETE, "node-gone"), settled


def test_a_deleted_nodes_pod_whose_deletion_someone_else_shortened_into_the_past_is_waited_out_for_that_grace(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain whose node object was deleted while its instance runs, the last of its pods there being deleted by
    # someone else (a rollout, with a grace of 5 minutes), the others stopped by their kubelet
    record, _ = _evicting(cluster)
    slow = _last_on_its_deleted_node(server, cluster, 300)

    # When someone else shortens that deletion to 20 s (an operator's kubectl delete --grace-period=20): the API server
    # counts the new deadline from the first delete (rest.BeforeDelete: the old deadline less the old grace, plus the
    # new one), while the pod's kubelet, which sees the shorter grace, restarts its kill with it from then (up to
    # Kubernetes 1.32 the deadline may land in the past: kubernetes#122646). Here the drain looks a second past that
    # deadline, as it would had the shortening come 21 s after the first delete: it cannot tell when it came
    cluster.delete_pod(slow, 20)
    shortened = next(p for p in cluster.pods_on(NODE) if p.uid == slow.uid)
    assert (shortened.deletion_grace, shortened.deletion_at is not None) == (20, True)
    assert shortened.deletion_at is not None
    first_look = shortened.deletion_at + timedelta(seconds=1)
    step = evict(cluster)
    outcome = step(record, first_look)

    # Then it does not complete the action under that pod: its kubelet may be stopping it for 20 s more
    assert (outcome.then, outcome.again) == (None, True), outcome
    assert outcome.delay <= 21

    # When podgc's quarantine ends and it force-deletes the pod from the API, Then the drain settles once that grace,
    # counted from its first look, is over
    _podgc_removes_them(server, cluster)
    record = record.model_copy(update=dict(outcome.changes))
    waiting = step(record, first_look + timedelta(seconds=10))
    assert (waiting.then, waiting.again) == (None, True), waiting
    record = record.model_copy(update=dict(waiting.changes))
    settled = step(record, first_look + timedelta(seconds=21))
    assert (settled.then, settled.changes.get("outcome")) == (Step.COMPLETE, "node-gone"), settled


def test_a_deleted_nodes_pod_past_its_moved_deadline_with_a_grace_beyond_the_cap_is_asked_again_with_the_cap(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain whose node object was deleted while its instance runs, the last of its pods there deleted by
    # someone else with an hour's grace, then shortened by someone else to 20 minutes: the API server counts that
    # deadline from the first delete (rest.BeforeDelete), the kubelet kills the pod with 20 minutes from then
    record, _ = _evicting(cluster)
    slow = _last_on_its_deleted_node(server, cluster, 3600)
    cluster.delete_pod(slow, 1200)
    shortened = next(p for p in cluster.pods_on(NODE) if p.uid == slow.uid)
    assert shortened.deletion_at is not None
    # (the drain looks a second past that deadline, its own ten minutes on)
    first_look = shortened.deletion_at + timedelta(seconds=1)
    deadline = first_look + timedelta(seconds=600)
    record = record.model_copy(update={"drain_deadline": deadline})
    step = evict(cluster)
    cap = step._grace_cap(deadline, first_look)
    assert cap < 1200

    # When the drain polls
    outcome = step(record, first_look)

    # Then it asks that pod again with the drain's grace, as it does a pod whose deadline is to come (the API server
    # shortens the deletion, the kubelet kills the pod within it): left alone, its kubelet stops it 20 minutes on,
    # past the drain's deadline, where the drain settled node-gone with the pod still running
    assert (outcome.then, outcome.again) == (None, True), outcome
    asked = next(p for p in cluster.pods_on(NODE) if p.uid == slow.uid)
    assert asked.deletion_grace is not None
    assert asked.deletion_grace <= cap

    given = asked.deletion_grace

    # When podgc removes it from the API, Then the drain waits for that grace from the poll that asked it, no longer
    _podgc_removes_them(server, cluster)
    record = record.model_copy(update=dict(outcome.changes))
    waiting = step(record, first_look + timedelta(seconds=given - 1))
    assert (waiting.then, waiting.again) == (None, True), waiting
    record = record.model_copy(update=dict(waiting.changes))
    settled = step(record, first_look + timedelta(seconds=given + 1))
    assert (settled.then, settled.changes.get("outcome")) == (Step.COMPLETE, "node-gone"), settled


def test_a_deleted_nodes_pod_past_its_moved_deadline_whose_shortening_is_refused_is_waited_for_its_own_grace(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given the same pod past the deadline the API server moved back (an hour's deletion shortened by someone else to
    # 20 minutes), and an admission webhook that refuses its evictions
    record, _ = _evicting(cluster)
    slow = _last_on_its_deleted_node(server, cluster, 3600)
    cluster.delete_pod(slow, 1200)
    _evictions_pinned(server, slow)
    shortened = next(p for p in cluster.pods_on(NODE) if p.uid == slow.uid)
    assert shortened.deletion_at is not None
    first_look = shortened.deletion_at + timedelta(seconds=1)
    record = record.model_copy(update={"drain_deadline": first_look + timedelta(seconds=600)})
    step = evict(cluster)

    # When the drain polls, its ask refused, and podgc removes the pod from the API
    outcome = step(record, first_look)
    assert (outcome.then, outcome.again) == (None, True), outcome
    assert next(p for p in cluster.pods_on(NODE) if p.uid == slow.uid).deletion_grace == 1200
    _podgc_removes_them(server, cluster)

    # Then the drain is not taken to have shortened it: it still waits for it a few minutes on (its kubelet stops it
    # 20 minutes from the first look at the latest), up to its own deadline
    record = record.model_copy(update=dict(outcome.changes))
    later = step(record, first_look + timedelta(seconds=300))
    assert (later.then, later.again) == (None, True), later
