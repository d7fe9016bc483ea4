"""The drain's release of its node while something rewrites the node at every turn (a controller rewriting its
labels or its own annotations, a flapping condition: every write that names the node's version answered 409), on
the real Kubernetes adapter against the sandbox API server. The release names no version: it is conditional on
this lifecycle's annotations as read (test_release_after_status_post.py), which no other writer changes, and goes
through at its first try, where it once lost every try, its slot given back with the annotations left on the node."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import Step
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube import test_kube_drain_steps as drain_steps
from tests.integration.kube.cluster import run_retrying
from tests.integration.kube.test_kube_drain_steps import NODE, draining
from tests.support.fakes import T0, FakeAutoscaling, FakeMetrics
from tests.unit.drain.test_drain_steps import FakeEvents, FakeSlots, cleanup, cordon

SEED = drain_steps.SEED
STORM = Fault("storm", "kube-conflict", "PATCH nodes")  # every PATCH of a node that names its version: 409


def test_a_cleanup_in_a_409_storm_releases_its_node_at_its_first_try(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drained node, cordoned and annotated for its lifecycle, its action completed, and then every PATCH
    # of the node that names its version answered 409
    record = draining(Step.CORDON)
    claimed = cordon(cluster)(record, T0)
    record = record.model_copy(update={"step": Step.CLEANUP, "outcome": "drained", **claimed.changes})
    server.faults.arm([STORM], seed=1)
    slots, metrics, events = (
        FakeSlots(holders={NODE}, held_for={NODE: record.id}),
        FakeMetrics(),
        FakeEvents(),
    )
    step = cleanup(cluster, slots, FakeAutoscaling(), events, metrics=metrics)

    # When the cleanup runs
    runs, _ = run_retrying(step, record, T0, T0 + timedelta(seconds=60))

    # Then its first try releases the node: annotations off, the slot given back, nothing told as refused
    assert len(runs) == 1
    _, last = runs[-1]
    assert isinstance(last, Outcome), last
    assert (last.then, last.again) == (None, False)
    assert slots.released == [NODE]
    assert "ReleaseRefused" not in [reason for _, reason, _ in events.written]
    assert metrics.counts.get("EvictionErrors", 0) == 0
    node = server.get_object("nodes", NODE)
    assert node is not None
    annotations = node["metadata"].get("annotations") or {}
    assert (annotations.get("nodecycle.io/owner"), annotations.get("nodecycle.io/in-progress")) == (
        None,
        None,
    )
