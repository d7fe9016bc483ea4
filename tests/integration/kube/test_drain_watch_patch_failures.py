"""The watches after a drain's release (a node kept cordoned into the warm pool, or through scheduled maintenance)
when the node's PATCH that lifts the cordon keeps failing, on the real Kubernetes adapter against the sandbox API
server: a 409 storm (something rewrites the node at every turn), or a validating webhook on nodes that is down
(every PATCH answered 500). No slot is held by then, but each failure was tried again at once, or the step failed
into the engine's retries, for as long as it lasted: a hot loop of API calls and log lines for hours. As the
cordon's and the cleanup's failing PATCHes are (CORDON_FAILING, RELEASE_FAILING): read again and tried at once for
a few seconds, then told (a Warning event, the alarm) and tried at the watch's own pace, and at last left to an
operator, told again, the watch over."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.cleanup import (
    MAINTENANCE_POLL_SECONDS,
    POOL_IDLE_POLL_SECONDS,
    WATCH_FAILING_LIMIT,
)
from nodecycle.domain.engine import Outcome
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.ports.instances import ScheduledEvent
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube import test_kube_drain_steps as drain_steps
from tests.integration.kube.test_kube_drain_steps import INSTANCE, NODE, draining
from tests.support.fakes import T0, FakeAutoscaling, FakeMetrics
from tests.unit.drain.test_drain_steps import (
    Ec2Maintenance,
    FakeEvents,
    FakeSlots,
    cleanup,
    cordon,
    maintenance,
    reboot,
)

SEED = drain_steps.SEED
# (no 409 storm: a release names no version, a storm of other writers does not reach it; see
# test_release_in_a_conflict_storm.py)
FAILURES = {
    "webhook down": Fault("webhook", "kube-webhook-down", "PATCH nodes"),
}
HOURS = timedelta(hours=3)  # longer than any bound of a failing watch


class Ec2Pending(Ec2Maintenance):
    """EC2 listing ``events`` as pending for this module's instance."""

    def scheduled_events(self, instance_id: str) -> list[ScheduledEvent]:
        return list(self.events) if instance_id == INSTANCE else []


def run(
    step: Callable[[LifecycleRecord, datetime], Outcome],
    record: LifecycleRecord,
    start: datetime,
    until: datetime,
) -> list[tuple[datetime, Outcome]]:
    """The step run at each of its own delays (as its queue would deliver it) from ``start`` until it moves on or
    ``until`` has passed. A step that fails (raises) is the engine's to retry, for as long as it fails: it fails
    the test."""
    runs: list[tuple[datetime, Outcome]] = []
    at = start
    while at <= until:
        try:
            outcome = step(record, at)
        except TransientError as error:
            raise AssertionError(f"the watch failed into the engine's retries at {at}: {error}") from error
        runs.append((at, outcome))
        record = record.model_copy(update=dict(outcome.changes))
        if not outcome.again:
            break
        at += timedelta(seconds=max(outcome.delay, 1))
    return runs


def assert_bounded_and_told(
    runs: list[tuple[datetime, Outcome]], events: FakeEvents, metrics: FakeMetrics, pace: float
) -> None:
    """Tried at once for seconds, then at ``pace``, told once meanwhile; over at its bound, told again."""
    at, last = runs[-1]
    assert (last.then, last.again) == (None, False), "the watch ends"
    assert at <= T0 + WATCH_FAILING_LIMIT + timedelta(seconds=2 * pace)
    assert len(runs) <= WATCH_FAILING_LIMIT.total_seconds() / pace + 30
    reasons = [reason for node, reason, _ in events.written if node == NODE]
    assert reasons.count("ReleaseFailing") == 1
    assert reasons[-1] == "ReleaseRefused"
    assert metrics.counts["EvictionErrors"] >= 1
    assert all(outcome.delay >= 1 for _, outcome in runs[:-1])


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_a_warm_pool_watch_whose_uncordon_keeps_failing_is_paced_told_and_ends(
    cluster: KubeCluster, server: KubeServer, failure: str
) -> None:
    # Given a node drained into the warm pool, released with its cordon kept, its instance waiting in the pool
    record = draining(Step.CORDON, destination="WarmPool")
    claimed = cordon(cluster)(record, T0)
    record = record.model_copy(update={"step": Step.CLEANUP, "outcome": "drained", **claimed.changes})
    pooled = FakeAutoscaling(states={INSTANCE: "Warmed:Stopped"})
    slots, events, metrics = (
        FakeSlots(holders={NODE}, held_for={NODE: record.id}),
        FakeEvents(),
        FakeMetrics(),
    )
    step = cleanup(cluster, slots, pooled, events, metrics=metrics)
    held = step(record, T0)
    assert held.again, "the watch waits for the instance's kubelet to go"
    record = record.model_copy(update=dict(held.changes))

    # When the instance leaves the pool, and every PATCH of its node fails from then on
    pooled.states[INSTANCE] = "Pending"
    server.faults.arm([FAILURES[failure]], seed=1)
    runs = run(step, record, T0, T0 + HOURS)

    # Then the uncordon is tried at once for seconds, then at the watch's idle pace, told once, and the watch
    # ends at its bound, told as refused (the cordon left to an operator)
    assert_bounded_and_told(runs, events, metrics, POOL_IDLE_POLL_SECONDS)
    stored = server.get_object("nodes", NODE)
    assert stored is not None
    assert stored["spec"].get("unschedulable") is True


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_a_maintenance_watch_whose_uncordon_keeps_failing_is_paced_told_and_ends(
    cluster: KubeCluster, server: KubeServer, failure: str
) -> None:
    # Given a node drained for a reboot in half an hour, its instance in service
    record = maintenance(Step.CORDON, T0 + timedelta(minutes=30), node=NODE, zone="eu-west-1a")
    record = record.model_copy(update={"id": f"{INSTANCE}/scheduled-change", "instance_id": INSTANCE})
    claimed = cordon(cluster)(record, T0)
    assert claimed.then is None, claimed
    record = record.model_copy(update={"step": Step.CLEANUP, "outcome": "drained", **claimed.changes})
    in_service = FakeAutoscaling(states={INSTANCE: "InService"})
    slots, events, metrics = (
        FakeSlots(holders={NODE}, held_for={NODE: record.id}),
        FakeEvents(),
        FakeMetrics(),
    )
    ec2 = Ec2Pending(known={INSTANCE: "running"}, events=[reboot(at=T0 + timedelta(minutes=30))])
    step = cleanup(cluster, slots, in_service, events, ec2, metrics=metrics)
    released = step(record, T0)
    assert released.again, "the watch waits for the reboot"
    record = record.model_copy(update=dict(released.changes))

    # When the reboot is over (the instance rebooted: its kubelet back on a new boot id, which the watch waits for
    # before it lifts the cordon), the instance stayed, and every PATCH of its node fails from then on
    ec2.events.clear()
    assert server.instance_rebooting(NODE)
    assert server.instance_started(NODE)
    server.faults.arm([FAILURES[failure]], seed=1)
    runs = run(step, record, T0, T0 + HOURS)

    # Then the uncordon is tried at once for seconds, then at the watch's pace, told once, and the watch ends at
    # its bound, told as refused
    assert_bounded_and_told(runs, events, metrics, MAINTENANCE_POLL_SECONDS)
