"""A drain past its timeout under the force policy, on the real Kubernetes adapter against the sandbox API server:
the node and budget of the tests of pods that never leave (a finalizer nobody removes, a hung container runtime),
and the drain's polls at its own delays from its first to past its deadline."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import evict_step
from tests.unit.drain.test_drain_steps import FakeSlots, policy, terminating

NODE = "ip-10-0-1-10.eu-west-1.compute.internal"
INSTANCE = "i-0a1b2c3d4e5f60101"
SEED = {
    "namespaces": ["shop"],
    "nodes": [
        {"privateIp": "10.0.1.10", "instanceId": INSTANCE, "zone": "eu-west-1a"},
        {"privateIp": "10.0.2.10", "instanceId": "i-0a1b2c3d4e5f60201", "zone": "eu-west-1b"},
    ],
    # a budget that allows no disruption: the drain's evictions are refused until its timeout forces the pods
    "deployments": [{"name": "web", "namespace": "shop", "replicas": 4, "pdb": {"maxUnavailable": 0}}],
}


def forced_past_its_timeout(
    cluster: KubeCluster, server: KubeServer, *, timeout: timedelta, horizon: timedelta
) -> tuple[LifecycleRecord, datetime, datetime | None]:
    """The drain of NODE, begun ``timeout`` ago (its deadline now, by the API server's clock, which times the
    force's deletions), polled at its own delays until it ends or ``horizon`` past its deadline: its record, its
    deadline, and when it ended (None: not within the horizon)."""
    deadline = datetime.now(UTC)
    start = deadline - timeout
    record = terminating(
        Step.EVICT,
        id=f"{INSTANCE}/terminate/token",
        instance_id=INSTANCE,
        node=NODE,
        drain_started_at=start,
        drain_deadline=deadline,
    )
    step = evict_step(
        cluster,
        NODE,
        INSTANCE,
        slots=FakeSlots(holders={NODE}, held_for={NODE: record.id}),
        drain_policy=policy(timeout_policy="force"),
    )
    at = start
    while at <= deadline + horizon:
        outcome = step(record, at)
        server.settle()
        record = record.model_copy(update=dict(outcome.changes))
        if not outcome.again:
            return record, deadline, at
        # (from its first poll straight to its deadline: nothing changes in between)
        at = max(at + timedelta(seconds=max(outcome.delay, 1)), deadline)
    return record, deadline, None
