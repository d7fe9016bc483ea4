"""The sandbox API server as the drain function meets it: its RBAC, its role mapped for the EKS token that
mock_aws signs, and the real Kubernetes adapter on it through EKS access (endpoint, CA, token)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from moto import mock_aws

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.adapters.kube.eks_access import EksCluster
from nodecycle.domain.drain.evict import Evict
from nodecycle.domain.ports.cluster import Events
from nodecycle_sandbox.aws.eks import point_cluster
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import DRAIN_ROLE, act_as_drain
from tests.support.fakes import FakeMetrics
from tests.unit.drain.builders import no_end
from tests.unit.drain.test_drain_steps import FakeEvents, FakeSlots, NoDns, policy, wakes_to_nowhere

ACCOUNT = "123456789012"


@contextmanager
def drain_server(seed: Mapping[str, Any], **options: Any) -> Iterator[KubeServer]:
    """A started HTTPS server (``options``: the server's own) with the drain function's RBAC and ``seed``,
    settled."""
    with KubeServer(tls=True, **options) as kube:
        act_as_drain(kube)
        # mock_aws signs with its own fake key: it stands for the drain function's role here
        kube.map_role("FOOBARKEY", DRAIN_ROLE, "nodecycle-DrainFunction")
        kube.seed(dict(seed))
        kube.settle()
        yield kube


@contextmanager
def eks_describing(server: KubeServer) -> Iterator[None]:
    """EKS (moto) describing the cluster "sandbox" as ``server``: its endpoint and certificate."""
    with mock_aws():
        point_cluster(
            account=ACCOUNT,
            region="eu-west-1",
            name="sandbox",
            endpoint=server.url,
            ca_pem=server.ca_pem.decode(),
        )
        yield


@contextmanager
def drain_cluster(server: KubeServer) -> Iterator[KubeCluster]:
    """The adapter on ``server``, as the drain function builds it (EKS answers for the endpoint)."""
    with eks_describing(server):
        yield KubeCluster(EksCluster("sandbox").api_client)


def evict_step(
    cluster: KubeCluster,
    node: str,
    instance: str,
    *,
    metrics: FakeMetrics | None = None,
    events: Events | None = None,
    time_left: Callable[[], float | None] = no_end,
) -> Evict:
    """The EVICT step on the real adapter, as the drain function builds it: ``node`` holding its budget slot,
    ``instance`` running, the settings' defaults; no wake-up sent anywhere."""
    return Evict(
        cluster=cluster,
        slots=FakeSlots(holders={node}),
        dispatcher=wakes_to_nowhere(),
        instances=NoDns(known={instance: "running"}),
        policy=policy(),
        metrics=metrics or FakeMetrics(),
        events=events or FakeEvents(),
        time_left=time_left,
    )
