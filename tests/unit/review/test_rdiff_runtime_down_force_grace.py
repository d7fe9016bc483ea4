"""A pod on a node whose container runtime is down, whose deletion the drain's force shortened. The API server counts
the force's shorter grace from the pod's first delete (its deadline possibly long past), while a kubelet whose runtime
answers again stops it with that grace from when it sees it: the grace owed to it runs from the force, as on any node.
The runtime-down path, which leaves a pod once its grace is over, read the grace from the API server's deadline alone,
and left such a pod at the force's first look."""

from __future__ import annotations

from datetime import timedelta

from tests.support.fakes import T0
from tests.unit.drain.test_drain_steps import NODE, FakeCluster, evict, node, pod, polled


def test_a_pod_the_force_shortened_on_a_runtime_down_node_is_given_the_force_grace_from_the_force() -> None:
    # Given a pod a rollout deleted with its own 600 s grace 100 s before the drain's timeout, on a node whose
    # container runtime is down (Ready False, PLEG not healthy), and a drain whose force grace is 30 s
    late = T0 + timedelta(seconds=600)
    asked = late - timedelta(seconds=100)
    rolled = pod("web-1", grace_period=600, deletion_at=asked + timedelta(seconds=600), deletion_grace=600)
    down = node(ready=False, runtime_down=True)
    cluster = FakeCluster(nodes={NODE: down}, pods=[rolled], now=late)
    step = evict(cluster, force_grace_seconds="30")

    # When the drain runs at its own delays from its timeout, its force deleting the pod again (its deadline 70 s
    # past by the API server's count from the first request)
    record, at, ended_at = polled(), late, None
    while at <= late + timedelta(seconds=120):
        cluster.now = at
        outcome = step(record, at)
        record = record.model_copy(update=dict(outcome.changes))
        if not outcome.again:
            ended_at = at
            break
        at += timedelta(seconds=max(outcome.delay, 1))

    # Then the pod is left no sooner than the force grace from the force (a runtime back meanwhile stops it with
    # it), nor later than that grace and invariant 10's margin
    assert cluster.deletions == [("web-1", 30)]
    assert ended_at is not None
    assert late + timedelta(seconds=30) <= ended_at <= late + timedelta(seconds=30 + 20), ended_at - late
    assert (
        record.outcome
        == "drain-timeout-forced; 1 pods left terminating (node not ready, its container runtime down)"
    )
