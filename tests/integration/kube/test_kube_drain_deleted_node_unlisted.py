"""A drain past its timeout whose node object was deleted under its pods (``kubectl delete node`` while its instance
runs: the pods stay bound to its name until the pod garbage collector ends them) and whose pods cannot be listed (an
API server whose lists fail: 500), on the real Kubernetes adapter against the sandbox API server. The poll of a node
that is there applies its timeout policy on what can be known when its pods cannot be listed past the timeout (see
test_kube_drain_failing_node_reads.py); the poll of a deleted node listed its pods first, whatever its deadline, and
raised the failure into the engine's retries every few seconds until the action's global timeout, its slot renewed
by nothing and held until it expired (invariants 2 and 10)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.evict import FORCED_POD_SLACK
from nodecycle.domain.engine import Outcome
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube import test_kube_drain_steps as drain_steps
from tests.integration.kube.cluster import FORCE_GRACE, evict_step, run_retrying
from tests.integration.kube.test_kube_drain_steps import DEADLINE, INSTANCE, NODE, draining
from tests.support.fakes import FakeMetrics
from tests.unit.drain.test_drain_steps import FakeEvents, FakeSlots, policy

SEED = drain_steps.SEED
SERVER_OPTIONS = {"pod_gc_quarantine_seconds": 600.0}  # a deleted node's pods stay bound to it for the test
POLL = timedelta(seconds=policy().poll_seconds)


@pytest.mark.parametrize("on_timeout", ["force", "continue"])
def test_a_drain_whose_node_was_deleted_and_whose_pods_cannot_be_listed_settles_at_its_timeout(
    cluster: KubeCluster, server: KubeServer, on_timeout: str
) -> None:
    # Given a drain whose node object was deleted under its pods, and an API server that fails every list of pods
    record = draining(extra={"polls": 1})
    slots = FakeSlots(holders={NODE}, held_for={NODE: record.id})
    metrics, events = FakeMetrics(), FakeEvents()
    step = evict_step(
        cluster,
        NODE,
        INSTANCE,
        metrics=metrics,
        events=events,
        slots=slots,
        drain_policy=policy(timeout_policy=on_timeout),
    )
    server.remove_node(NODE)
    server.faults.arm([Fault("etcd", "kube-error", "GET pods")], seed=1)

    # When it polls as the engine runs it (a failure retried at the drain steps' cap) from before its deadline
    runs, record = run_retrying(
        step, record, DEADLINE - timedelta(seconds=30), DEADLINE + timedelta(minutes=10)
    )

    # Then it is retried until its deadline, and there its timeout policy ends it on what can be known: continue at
    # once, force once the force grace and its slack are over (a list that answers by then is deleted from), told
    # once as a drain timeout
    assert server.faults.firings()
    at, last = runs[-1]
    assert isinstance(last, Outcome), last
    assert (last.then, last.again) == (None, False)
    assert record.outcome == "drain-timeout-unlisted"
    if on_timeout == "continue":
        assert DEADLINE <= at <= DEADLINE + POLL
    else:
        assert at <= DEADLINE + FORCE_GRACE + FORCED_POD_SLACK + POLL
    assert metrics.counts["DrainTimeouts"] == 1
    assert [reason for _, reason, _ in events.written].count("DrainTimeout") == 1
