"""A drain step against an API server that takes each connection and never answers (or answers each call late),
on the real adapters and the sandbox API server: the step's calls end within its invocation's time, less what the
engine needs after the step (its commit, a heartbeat, the next message). Each call otherwise waits out its whole
read timeout (20 s), a pass's two failed evictions 40 s, and an inline step (begun with 15 s of the function's 60
left) is killed mid-call: it commits nothing, and its message comes back only after the queue's visibility timeout
(150 s), at its fifth receive into the dead-letter queue. A pass cut short goes on at its next poll."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from nodecycle.adapters.kube.budget import ConfigMapBudgetStore
from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.adapters.kube.core_v1 import CoreV1
from nodecycle.adapters.kube.eks_access import EksCluster
from nodecycle.domain.errors import TransientError
from nodecycle.wiring.drain import MIN_RUN_SECONDS, STEP_RESERVE_SECONDS, InvocationTime
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE
from tests.integration.kube.cluster import eks_describing, evict_step
from tests.integration.kube.test_kube_drain_steps import INSTANCE, NODE, draining
from tests.support.fakes import T0

PODS = 8
SEED = {
    "namespaces": ["shop"],
    "nodes": [{"privateIp": "10.0.1.10", "instanceId": INSTANCE, "zone": "eu-west-1a"}],
    # pods that take an hour to stop: asked to leave, they stay, being deleted
    "deployments": [{"name": "web", "namespace": "shop", "replicas": PODS, "shutdownSeconds": 3600}],
}
RUN_SECONDS = MIN_RUN_SECONDS + 1.0  # left of the invocation for the step's calls (less sets no deadline)
# How late past the invocation's time a call may end on a loaded machine (the cut is each call's own timeout):
# well under what each case takes without the cut (40, 20 and 15 s)
LATE_SECONDS = 4.0


@pytest.fixture
def run() -> Iterator[InvocationTime]:
    """An invocation of the drain function with RUN_SECONDS left for a step's calls."""
    invocation = InvocationTime()
    with invocation.running(RUN_SECONDS + STEP_RESERVE_SECONDS):
        yield invocation


@pytest.fixture
def access(server: KubeServer, run: InvocationTime) -> Iterator[EksCluster]:
    """The cluster's access as the drain function builds it: its calls end within the invocation's time."""
    with eks_describing(server):
        yield EksCluster("sandbox", time_left=run.left)


def web_pods(server: KubeServer) -> list[str]:
    """The names of the node's web pods, as seeded."""
    names = [
        pod["metadata"]["name"]
        for pod in server.objects("pods", "shop")
        if pod["spec"].get("nodeName") == NODE
    ]
    assert len(names) == PODS
    return names


def asked_to_leave(server: KubeServer, names: list[str]) -> int:
    """How many of the pods ``names`` are gone or being deleted."""
    found = [server.get_object("pods", name, "shop") for name in names]
    return sum(1 for pod in found if pod is None or pod["metadata"].get("deletionTimestamp"))


def test_a_pass_whose_evictions_hang_ends_within_its_runs_time(
    server: KubeServer, access: EksCluster, run: InvocationTime
) -> None:
    # Given an API server that takes each eviction and never answers it
    pods = web_pods(server)
    server.faults.arm([Fault("hung", "kube-hang", "POST pods/eviction")], seed=1)
    step = evict_step(KubeCluster(access.api_client), NODE, INSTANCE, time_left=run.left)

    # When the drain polls, with RUN_SECONDS of its invocation left for its calls
    started = time.monotonic()
    outcome = step(draining(), T0)
    took = time.monotonic() - started

    # Then its pass ends as a poll, within the invocation's time (the engine's reserve is still there for its
    # commit and the next message), rather than after each eviction's read timeout; nothing was evicted
    assert outcome.again
    assert took < RUN_SECONDS + LATE_SECONDS, took
    assert server.faults.firings()
    assert asked_to_leave(server, pods) == 0


def test_a_read_of_the_node_that_hangs_fails_the_step_within_its_runs_time(
    server: KubeServer, access: EksCluster, run: InvocationTime
) -> None:
    # Given an API server that answers nothing at all
    server.faults.arm([Fault("hung", "kube-hang", "*")], seed=1)
    step = evict_step(KubeCluster(access.api_client), NODE, INSTANCE, time_left=run.left)

    # When the drain polls, Then its first read fails within the invocation's time: the engine retries the step
    started = time.monotonic()
    with pytest.raises(TransientError):
        step(draining(), T0)
    assert time.monotonic() - started < RUN_SECONDS + LATE_SECONDS
    assert len(server.faults.firings()) == 1


def test_a_budget_read_that_hangs_fails_within_the_runs_time(
    server: KubeServer, access: EksCluster, run: InvocationTime
) -> None:
    # Given the budget's ConfigMap, which every drain poll renews its slot in, and an API server that never
    # answers a read of it
    store = ConfigMapBudgetStore(lambda: CoreV1(access.api_client()), namespace=NAMESPACE)
    server.faults.arm([Fault("hung", "kube-hang", "GET configmaps")], seed=1)

    # When it is read, Then the read fails within the invocation's time
    started = time.monotonic()
    with pytest.raises(TransientError):
        store.read()
    assert time.monotonic() - started < RUN_SECONDS + LATE_SECONDS


def test_a_pass_of_slow_evictions_stops_asking_at_its_runs_end_and_the_next_poll_asks_the_rest(
    server: KubeServer, access: EksCluster, run: InvocationTime
) -> None:
    # Given an API server that answers each eviction a second late
    pods = web_pods(server)
    server.faults.arm([Fault("slow", "kube-slow", "POST pods/eviction", value=1.0)], seed=1)
    cluster = KubeCluster(access.api_client)
    record = draining()

    # When the drain polls, with RUN_SECONDS of its invocation left for its calls
    outcome = evict_step(cluster, NODE, INSTANCE, time_left=run.left)(record, T0)

    # Then it did not ask all eight (eight seconds of calls), and polls again
    assert outcome.again
    assert asked_to_leave(server, pods) < PODS

    # And its next poll, in an invocation of its own, asks the others
    server.faults.disarm()
    record = record.model_copy(update=dict(outcome.changes))
    with run.running(60.0):
        evict_step(cluster, NODE, INSTANCE, time_left=run.left)(record, T0)
    assert asked_to_leave(server, pods) == PODS
