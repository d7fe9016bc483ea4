"""The sandbox API server as the drain function meets it: its RBAC, its role mapped for the EKS token that
mock_aws signs, and the real Kubernetes adapter on it through EKS access (endpoint, CA, token)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from moto import mock_aws

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.adapters.kube.eks_access import EksCluster
from nodecycle.domain.drain.evict import Evict
from nodecycle.domain.engine import DRAIN_RETRY_CAP_SECONDS, Outcome
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.policy import DrainPolicy
from nodecycle.domain.ports.cluster import Events
from nodecycle_sandbox.aws.eks import point_cluster
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import DRAIN_ROLE, act_as_drain
from tests.support.fakes import FakeMetrics
from tests.unit.drain.builders import no_end
from tests.unit.drain.test_drain_steps import FakeEvents, FakeSlots, NoDns, policy, wakes_to_nowhere

ACCOUNT = "123456789012"
TIMEOUT = policy().timeout  # the unit tests' policy: drain timeout 600 s...
FORCE_GRACE = timedelta(seconds=policy().force_grace)  # ...and force grace 5 s


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
    drain_policy: DrainPolicy | None = None,
    slots: FakeSlots | None = None,
) -> Evict:
    """The EVICT step on the real adapter, as the drain function builds it: ``node`` holding its budget slot (in
    ``slots``, or slots of its own), ``instance`` running, ``drain_policy`` or the settings' defaults; no wake-up
    sent anywhere."""
    return Evict(
        cluster=cluster,
        slots=slots or FakeSlots(holders={node}),
        dispatcher=wakes_to_nowhere(),
        instances=NoDns(known={instance: "running"}),
        policy=drain_policy or policy(),
        metrics=metrics or FakeMetrics(),
        events=events or FakeEvents(),
        time_left=time_left,
    )


Runs = list[tuple[datetime, Outcome | TransientError]]


def run(
    step: Callable[[LifecycleRecord, datetime], Outcome],
    record: LifecycleRecord,
    start: datetime,
    until: datetime,
) -> tuple[list[tuple[datetime, Outcome]], LifecycleRecord]:
    """The step run at each of its own delays (as its queue would deliver it) from ``start`` until it moves on
    or ``until`` has passed: each run's time and outcome, and the record after the last. A transient failure is
    raised."""
    runs, record = run_retrying(step, record, start, until, transient=False)
    return [(at, outcome) for at, outcome in runs if isinstance(outcome, Outcome)], record


def run_retrying(
    step: Callable[[LifecycleRecord, datetime], Outcome],
    record: LifecycleRecord,
    start: datetime,
    until: datetime,
    *,
    transient: bool = True,
) -> tuple[Runs, LifecycleRecord]:
    """The step run as the engine runs it, from ``start`` until it moves on or ``until`` has passed: again after
    its outcome's delay, or (``transient``) after a transient failure at the drain steps' retry cap, that run's
    outcome the failure; not ``transient``, the failure is raised."""
    runs: Runs = []
    at = start
    while at <= until:
        try:
            outcome = step(record, at)
        except TransientError as error:
            if not transient:
                raise
            runs.append((at, error))
            at += timedelta(seconds=DRAIN_RETRY_CAP_SECONDS)
            continue
        runs.append((at, outcome))
        record = record.model_copy(update=dict(outcome.changes))
        if not outcome.again:
            break
        at += timedelta(seconds=max(outcome.delay, 1))
    return runs, record
