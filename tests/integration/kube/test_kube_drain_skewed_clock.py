"""A drain function whose clock runs ahead of the API server's (the campaign's clock-skew fault, an instance of
the runner skewed for one invocation), on the real Kubernetes adapter against the sandbox API server. A pod's
deletionTimestamp is stamped on the API server's clock; once the force policy has acted, the drain leaves a pod
still there FORCED_STOP_SLACK past that deadline. Read on the function's clock a minute ahead, the pods it forced
looked past their deadline while their grace still ran, and the drain ended (the instance terminated) with them
still stopping: invariant 2; a minute behind, it held the slot a minute past the force grace (invariant 10). The
API server's answers tell its clock (their Date), at no call more."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from kubernetes.client import CoreV1Api

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.adapters.kube.eks_access import EksCluster
from nodecycle.domain.drain.evict import FORCED_STOP_SLACK
from nodecycle.domain.model import Step
from nodecycle_sandbox.chaos.invariants import SLOT_MARGIN
from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.kube import api as sandbox_api
from nodecycle_sandbox.kube import eviction as sandbox_eviction
from nodecycle_sandbox.kube import finalizers as sandbox_finalizers
from nodecycle_sandbox.kube import kubelet as sandbox_kubelet
from nodecycle_sandbox.kube import store as sandbox_store
from tests.integration.kube.cluster import TIMEOUT, eks_describing, evict_step
from tests.integration.kube.forced_drain import INSTANCE, NODE
from tests.integration.kube.forced_drain import SEED as SEED  # (read by conftest.py's server fixture)
from tests.unit.budget.fakes import FakeClock
from tests.unit.drain.test_drain_steps import FakeSlots, policy, terminating

AHEAD = timedelta(seconds=60)  # the function's clock over the API server's
FORCE_GRACE = 30  # seconds: the pods' grace once forced, longer than a poll (5 s)


@pytest.fixture
def api_server_clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """The sandbox API server's clock (its objects' stamps, deletion deadlines, its answers' Date, the kubelets'
    deletes), moved by the test."""
    clock = FakeClock(datetime.now(UTC).replace(microsecond=0))
    ticking = SimpleNamespace(time=lambda: clock.now().timestamp(), monotonic=time.monotonic)
    for module in (sandbox_api, sandbox_store, sandbox_finalizers, sandbox_eviction, sandbox_kubelet):
        monkeypatch.setattr(module, "time", ticking)
    return clock


@pytest.fixture
def lead(request: pytest.FixtureRequest) -> timedelta:
    """How far the drain function's clock runs ahead of the API server's (behind: negative)."""
    ahead: timedelta = request.param
    return ahead


@pytest.fixture
def ahead_cluster(server: KubeServer, api_server_clock: FakeClock, lead: timedelta) -> Iterator[KubeCluster]:
    """The adapter as a drain function whose clock runs ``lead`` ahead of the API server's builds it."""
    with eks_describing(server):
        yield KubeCluster(
            EksCluster("sandbox").api_client, wall_clock=lambda: (api_server_clock.now() + lead).timestamp()
        )


@pytest.mark.parametrize(
    "lead",
    [
        pytest.param(AHEAD, id="a minute ahead: left within their grace"),
        # (the force grace from the force, on the function's own clock, bounds the forced pods' wait from below
        # since 0448c67; their deadlines read on the wrong clock still held the slot past it)
        pytest.param(-AHEAD, id="a minute behind: the slot held a minute past the force grace"),
    ],
    indirect=True,
)
def test_pods_forced_by_a_drain_whose_clock_runs_off_are_given_their_grace_on_the_api_servers_clock(
    ahead_cluster: KubeCluster, server: KubeServer, api_server_clock: FakeClock, lead: timedelta
) -> None:
    # Given the node cordoned, its web pods' budget refusing every eviction, its container runtime hung (the
    # pods forced stay Terminating: a healthy kubelet would still be stopping them within their grace), and a
    # drain whose clock runs a minute ahead of the API server's at its timeout (its deadline on its own clock)
    admin = CoreV1Api(server.api_client())
    admin.patch_node(NODE, {"spec": {"unschedulable": True}})
    server.hang_runtime(NODE)
    deadline = api_server_clock.now() + lead
    record = terminating(
        Step.EVICT,
        id=f"{INSTANCE}/terminate/token",
        instance_id=INSTANCE,
        node=NODE,
        drain_started_at=deadline - TIMEOUT,
        drain_deadline=deadline,
        extra={"polls": 1},
    )
    step = evict_step(
        ahead_cluster,
        NODE,
        INSTANCE,
        slots=FakeSlots(holders={NODE}, held_for={NODE: record.id}),
        drain_policy=policy(timeout_policy="force", force_grace_seconds=str(FORCE_GRACE)),
    )

    # When the drain polls at its own delays from its deadline, its force policy deleting the pods
    ended_at = None
    while api_server_clock.now() + lead <= deadline + timedelta(seconds=300):
        outcome = step(record, api_server_clock.now() + lead)
        server.settle()
        record = record.model_copy(update=dict(outcome.changes))
        if not outcome.again:
            ended_at = api_server_clock.now()
            break
        api_server_clock.advance(max(outcome.delay, 1))

    # Then the drain was forced, and left the pods no sooner than their deletion deadline on the API server's
    # clock (their grace given), nor much later (invariant 10)
    pods = [p for p in server.objects("pods", "shop") if (p.get("spec") or {}).get("nodeName") == NODE]
    deadlines = [
        datetime.fromisoformat(p["metadata"]["deletionTimestamp"].replace("Z", "+00:00")) for p in pods
    ]
    assert len(deadlines) == 2, "the test needs two web pods on the node, forced"
    assert ended_at is not None
    assert record.forced_at is not None
    assert ended_at >= max(deadlines) + FORCED_STOP_SLACK, (ended_at, max(deadlines))
    ends_by = deadline - lead + timedelta(seconds=FORCE_GRACE + SLOT_MARGIN) + timedelta(seconds=1)
    assert ended_at <= ends_by, (ended_at, ends_by)
