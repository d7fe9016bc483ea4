"""Pods a controller the drain does not know puts straight back on the node, on the real Kubernetes adapter
against the sandbox API server: a DaemonSet-like controller of its own kind (an operator's node agent) binds each
replacement to the node by ``spec.nodeName``, past the cordon, as soon as the evicted pod is gone. Each
replacement is a new pod (a new uid) that the drain evicts again, poll after poll; and its timeout policy ends
the drain on time all the same (invariants 2 and 10), with the controller's pod still there. Coverage: the drain's
by-uid bookkeeping (graces, failures, reports) over pods replaced under it. (The node is not cordoned here, so no
cordon time tells these pods apart; on a node cordoned, with its unschedulable taint's time, a replacement created
past it is left alone: test_kube_drain_pods_tolerating_the_cordon.py.)"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import cast

import pytest
from kubernetes.client import CoreV1Api, V1Pod

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.evict import FORCED_POD_SLACK
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube import test_kube_drain_steps as drain_steps
from tests.integration.kube.cluster import FORCE_GRACE, TIMEOUT, evict_step
from tests.integration.kube.test_kube_drain_steps import INSTANCE, NODE, draining
from tests.support.fakes import FakeMetrics
from tests.unit.drain.test_drain_steps import policy

SEED = drain_steps.SEED


def agent(number: int) -> V1Pod:
    """The node agent's pod: bound to the node by its controller, which is no DaemonSet (as JSON: the client
    sends a dict as it is)."""
    return cast(
        "V1Pod",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"agent-{number}",
                "namespace": "shop",
                "ownerReferences": [
                    {
                        "apiVersion": "agents.example.com/v1",
                        "kind": "NodeAgent",
                        "name": "agent",
                        "uid": "4b7c2f0e-0000-4000-8000-000000000001",
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "nodeName": NODE,
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "agent", "image": "example.com/agent:1"}],
            },
        },
    )


@pytest.mark.parametrize("on_timeout", ["force", "continue"])
def test_pods_a_controller_puts_straight_back_on_the_node_are_evicted_again_until_the_timeout_policy_ends_it(
    cluster: KubeCluster, server: KubeServer, on_timeout: str
) -> None:
    # Given a drain of the node, and a controller that puts a new agent pod on it whenever the last is gone or
    # going
    admin = CoreV1Api(server.api_client())
    created = [1]
    admin.create_namespaced_pod("shop", agent(1))
    start = datetime.now(UTC)
    deadline = start + TIMEOUT
    metrics = FakeMetrics()
    step = evict_step(
        cluster, NODE, INSTANCE, metrics=metrics, drain_policy=policy(timeout_policy=on_timeout)
    )
    record = draining().model_copy(update={"drain_started_at": start, "drain_deadline": deadline})

    # When the drain polls from its start on, the controller replacing its pod between polls
    at, outcome = start, None
    while at <= deadline + FORCE_GRACE + FORCED_POD_SLACK + timedelta(seconds=60):
        outcome = step(record, at)
        record = record.model_copy(update=dict(outcome.changes))
        if not outcome.again:
            break
        last = server.get_object("pods", f"agent-{created[-1]}", "shop")
        if last is None or last["metadata"].get("deletionTimestamp"):
            created.append(created[-1] + 1)
            admin.create_namespaced_pod("shop", agent(created[-1]))
        at += timedelta(seconds=max(outcome.delay, 1))

    # Then every replacement was asked to leave in turn, and the timeout policy ended the drain on time, the
    # controller's latest pod still on the node
    assert outcome is not None
    assert (outcome.then, outcome.again) == (None, False)
    assert len(created) >= 10, "the controller put its pod back again and again"
    # (each replacement until the deadline was evicted; those after it the force policy deletes)
    assert metrics.counts["PodsEvicted"] >= 10
    if on_timeout == "continue":
        assert record.outcome == "drain-timeout-continued"
        assert deadline <= at <= deadline + timedelta(seconds=5)
    else:
        assert record.outcome in ("drain-timeout-forced-incomplete", "drain-timeout-forced")
        # (forced at its first poll past the deadline, ended at the first poll past its grace and slack)
        assert at <= deadline + FORCE_GRACE + FORCED_POD_SLACK + timedelta(seconds=10)
    assert server.get_object("pods", f"agent-{created[-1]}", "shop") is not None
