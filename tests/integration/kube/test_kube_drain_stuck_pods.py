"""Pods that will not go, on the real Kubernetes adapter against the sandbox API server: a node whose kubelet is
lost (Ready Unknown), its pods carrying a finalizer nobody removes, their PodDisruptionBudget counting them
unhealthy and refusing their eviction. The drain's timeout policy applies at its deadline (force: the pods are
deleted and, never finishing, no longer waited for once their force grace is over; continue: the drain goes on at
once), and its cleanup gives the slot back: no drain holds a slot past its timeout, the force grace and a margin
(invariant 10)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from kubernetes.client import CoreV1Api

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.common import STUCK_AFTER
from nodecycle.domain.drain.evict import FORCED_POD_SLACK
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.nodes import NodeFinder
from nodecycle_sandbox.aws.group import wait_for
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube import test_kube_drain_lost_kubelet as lost_kubelet
from tests.integration.kube.cluster import FORCE_GRACE, evict_step
from tests.integration.kube.test_kube_drain_lost_kubelet import (
    LOST,
    LOST_INSTANCE,
    TIMEOUT,
    healthy,
    web_pods,
)
from tests.unit.drain.test_drain_steps import (
    FakeSlots,
    NoDns,
    cleanup,
    cordon,
    policy,
    terminating,
)

SEED = lost_kubelet.SEED  # two nodes, two web pods on each, one unavailable allowed


def claimed(cluster: KubeCluster, start: datetime) -> LifecycleRecord:
    """The lost node's terminate lifecycle, its cordon done (annotated and cordoned), at its evictions."""
    node = cluster.get_node(LOST)
    assert node is not None
    record = terminating(
        Step.CORDON,
        id=f"{LOST_INSTANCE}/terminate/token",
        instance_id=LOST_INSTANCE,
        node=LOST,
        node_uid=node.uid,
    )
    claim = cordon(cluster, finder=NodeFinder(cluster, NoDns()))(record, start)
    return record.model_copy(
        update={
            **claim.changes,
            "step": Step.EVICT,
            "drain_started_at": start,
            "drain_deadline": start + TIMEOUT,
        }
    )


@pytest.mark.parametrize("on_timeout", ["force", "continue"])
def test_stuck_pods_of_a_lost_node_meet_the_timeout_policy_on_time_and_the_slot_is_given_back(
    cluster: KubeCluster, server: KubeServer, on_timeout: str
) -> None:
    # Given the lost node's drain under way: its web pods carry a finalizer nobody removes, and its kubelet is
    # gone, so their budget counts them unhealthy and refuses their eviction
    admin = CoreV1Api(server.api_client())
    stuck = web_pods(cluster, LOST)
    for pod in stuck:
        admin.patch_namespaced_pod(
            pod.name, pod.namespace, {"metadata": {"finalizers": ["example.com/keep"]}}
        )
    start = datetime.now(UTC)
    record = claimed(cluster, start)
    server.kill_kubelet(LOST, grace_seconds=0)
    wait_for(lambda: healthy(server) == 2, 10, "the budget to count the lost node's pods unhealthy")
    slots = FakeSlots(holders={LOST}, held_for={LOST: record.id})
    step = evict_step(
        cluster, LOST, LOST_INSTANCE, slots=slots, drain_policy=policy(timeout_policy=on_timeout)
    )

    # When the drain polls from its start past its deadline
    deadline = start + TIMEOUT
    ended_at = None
    for at in (start, start + timedelta(seconds=5), deadline, deadline + FORCE_GRACE + timedelta(seconds=1)):
        outcome = step(record, at)
        record = record.model_copy(update=dict(outcome.changes))
        if not outcome.again:
            ended_at = at
            break

    # Then it ends no later than its deadline and the force grace (continue: at its deadline), its pods left
    assert ended_at is not None
    assert ended_at <= deadline + FORCE_GRACE + STUCK_AFTER + FORCED_POD_SLACK
    if on_timeout == "continue":
        assert (ended_at, record.outcome) == (deadline, "drain-timeout-continued")
    else:
        assert record.outcome == "drain-timeout-forced; 2 pods left terminating (node not ready)"
    assert all(server.get_object("pods", pod.name, "shop") is not None for pod in stuck)

    # And its cleanup gives the slot back and clears the node's annotations
    cleanup(cluster, slots)(record.model_copy(update={"step": Step.CLEANUP}), ended_at)
    assert LOST not in slots.holders
    node = cluster.get_node(LOST)
    assert node is not None
    assert node.owner is None
