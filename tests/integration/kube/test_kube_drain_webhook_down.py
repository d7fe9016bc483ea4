"""A validating webhook on nodes that is down (``failurePolicy: Fail``: every node PATCH answered 500 ``failed
calling webhook``), on the real Kubernetes adapter against the sandbox API server: a policy engine guarding nodes
whose pods crashed is a classic stuck drain. Each failure is transient, and retried as such it never ends: the
cordon's would keep the drain's time from ever starting (the action held until its global timeout, invariant
2), the cleanup's would keep the slot until its holder expires (invariant 10). A failure that goes on is told and
treated as the refusal it is by then, as a 409 storm is (see test_kube_drain_conflict_storms)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.engine import DRAIN_RETRY_CAP_SECONDS, Outcome
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube import test_kube_drain_steps as drain_steps
from tests.integration.kube.test_kube_drain_steps import DEADLINE, NODE, draining, on_its_way_out, web_pods
from tests.support.fakes import T0, FakeAutoscaling, FakeMetrics
from tests.unit.drain.test_drain_steps import FakeEvents, FakeSlots, cleanup, cordon

SEED = drain_steps.SEED
WEBHOOK_DOWN = Fault("webhook", "kube-webhook-down", "PATCH nodes")


def run(
    step: Callable[[LifecycleRecord, datetime], Outcome],
    record: LifecycleRecord,
    start: datetime,
    until: datetime,
) -> tuple[list[tuple[datetime, Outcome | TransientError]], LifecycleRecord]:
    """The step run as the engine runs it, from ``start`` until it moves on or ``until`` has passed: again after
    its outcome's delay, or after a transient failure at the drain steps' retry cap."""
    runs: list[tuple[datetime, Outcome | TransientError]] = []
    at = start
    while at <= until:
        try:
            outcome = step(record, at)
        except TransientError as error:
            runs.append((at, error))
            at += timedelta(seconds=DRAIN_RETRY_CAP_SECONDS)
            continue
        runs.append((at, outcome))
        record = record.model_copy(update=dict(outcome.changes))
        if not outcome.again:
            break
        at += timedelta(seconds=max(outcome.delay, 1))
    return runs, record


def test_a_cordon_a_webhook_that_is_down_fails_is_settled_at_the_drain_timeout(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a node whose every PATCH a webhook that is down fails, for longer than the drain timeout
    server.faults.arm([WEBHOOK_DOWN], seed=1)
    slots, metrics, events = FakeSlots(holders={NODE}), FakeMetrics(), FakeEvents()
    step = cordon(cluster, slots=slots, metrics=metrics, events=events)

    # When the drain cordons it, retried until past its drain timeout
    runs, _ = run(step, draining(Step.CORDON, zone="eu-west-1a"), T0, DEADLINE + timedelta(seconds=60))

    # Then the failure is told once and raised to the alarm, the slot renewed while it lasts, and the action
    # settled by the drain's timeout, counted from the first try, without any eviction
    at, last = runs[-1]
    assert isinstance(last, Outcome), last
    assert (last.then, last.changes.get("outcome")) == (Step.COMPLETE, "drain-timeout-cordon-refused")
    assert DEADLINE <= at < DEADLINE + timedelta(seconds=6)
    assert [reason for _, reason, _ in events.written].count("CordonRefused") == 1
    assert any("failed calling webhook" in message for message in events.messages)
    assert metrics.counts["EvictionErrors"] >= 1
    assert slots.requests, "the slot is renewed while the cordon is asked again"
    assert not any(on_its_way_out(server, pod) for pod in web_pods(cluster))


def test_a_cleanup_whose_release_a_webhook_that_is_down_fails_gives_its_slot_back(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drained node, its action completed, and then a webhook that is down failing its PATCH
    record = draining(Step.CORDON)
    claimed = cordon(cluster)(record, T0)
    record = record.model_copy(update={"step": Step.CLEANUP, "outcome": "drained", **claimed.changes})
    server.faults.arm([WEBHOOK_DOWN], seed=1)
    slots, metrics, events = (
        FakeSlots(holders={NODE}, held_for={NODE: record.id}),
        FakeMetrics(),
        FakeEvents(),
    )
    step = cleanup(cluster, slots, FakeAutoscaling(), events, metrics=metrics)

    # When the cleanup runs, retried for a minute
    runs, _ = run(step, record, T0, T0 + timedelta(seconds=60))

    # Then within seconds the slot is given back and the lifecycle ends, the release told as refused
    at, last = runs[-1]
    assert isinstance(last, Outcome), last
    assert (last.then, last.again) == (None, False)
    assert at <= T0 + timedelta(seconds=15)
    assert slots.released == [NODE]
    assert (NODE, "ReleaseRefused", "Warning") in events.written
