"""409 storms on the node's PATCH, on the real Kubernetes adapter against the sandbox API server: the drain's
cordon and its cleanup write the node with its resourceVersion (so that no other owner's claim is overwritten),
and a node that something else keeps changing (a controller that rewrites its labels or annotations, a flapping
condition) answers each of them 409 Conflict. One conflict is a concurrent writer, read again at once; a storm
must not keep the drain outside its timeout (invariant 2: the action settles by its drain's timeout policy, not
only at its global timeout) nor a slot held after its lifecycle is over (invariant 10)."""

from __future__ import annotations

from datetime import datetime, timedelta

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube import test_kube_drain_steps as drain_steps
from tests.integration.kube.test_kube_drain_steps import DEADLINE, NODE, draining, on_its_way_out, web_pods
from tests.support.fakes import T0, FakeAutoscaling, FakeMetrics
from tests.unit.drain.test_drain_steps import FakeEvents, FakeSlots, cleanup, cordon

SEED = drain_steps.SEED
STORM = Fault("storm", "kube-conflict", "PATCH nodes")  # every PATCH of a node that names its version: 409


def run(
    step: object, record: LifecycleRecord, start: datetime, until: datetime
) -> tuple[list[tuple[datetime, Outcome]], LifecycleRecord]:
    """The step run at each of its own delays (as its queue would deliver it) from ``start`` until it moves on
    or ``until`` has passed: each run's time and outcome, and the record after the last."""
    runs: list[tuple[datetime, Outcome]] = []
    at = start
    while at <= until:
        outcome = step(record, at)  # type: ignore[operator]
        runs.append((at, outcome))
        record = record.model_copy(update=dict(outcome.changes))
        if not outcome.again:
            break
        at += timedelta(seconds=max(outcome.delay, 1))
    return runs, record


def test_a_cordon_in_a_409_storm_is_retried_at_once_then_at_the_poll_interval_and_settled_at_the_drain_timeout(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a node whose every versioned PATCH conflicts, for longer than the drain timeout
    server.faults.arm([STORM], seed=1)
    slots, metrics, events = FakeSlots(holders={NODE}), FakeMetrics(), FakeEvents()
    step = cordon(cluster, slots=slots, metrics=metrics, events=events)
    record = draining(Step.CORDON, zone="eu-west-1a")

    # When the drain cordons it, at each retry its outcome asks for, until past its drain timeout
    runs, record = run(step, record, T0, DEADLINE + timedelta(seconds=60))

    # Then the first conflict is read again at once (a concurrent writer), the storm then asked again at the poll
    # interval with the slot renewed meanwhile, told once and raised to the alarm
    (_, first), *_ = runs
    assert (first.again, first.delay) == (True, 1)
    assert len(runs) < 600 / 5 + 10
    assert slots.requests, "the slot is renewed while the cordon is asked again"
    assert [reason for _, reason, _ in events.written].count("CordonRefused") == 1
    assert metrics.counts["EvictionErrors"] >= 1
    # And the action is settled by the drain's timeout, counted from the first try, without any eviction
    at, last = runs[-1]
    assert (last.then, last.again) == (Step.COMPLETE, False)
    assert last.changes["outcome"] == "drain-timeout-cordon-refused"
    assert DEADLINE <= at < DEADLINE + timedelta(seconds=6)
    assert (NODE, "DrainTimeout", "Warning") in events.written
    assert not any(on_its_way_out(server, pod) for pod in web_pods(cluster))
    node = server.get_object("nodes", NODE)
    assert node is not None
    assert not node["spec"].get("unschedulable")


def test_a_cordon_after_a_409_storm_counts_the_drains_time_from_its_first_try(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a cordon that met a 409 storm for a minute
    server.faults.arm([STORM], seed=1)
    step = cordon(cluster, slots=FakeSlots(holders={NODE}))
    runs, record = run(step, draining(Step.CORDON, zone="eu-west-1a"), T0, T0 + timedelta(seconds=60))
    assert runs[-1][1].again

    # When the storm is over and the cordon asked again
    server.faults.disarm()
    claimed = step(record, T0 + timedelta(seconds=65))

    # Then the node is cordoned, and the drain's time counts from its first try: a storm is drain time
    assert (claimed.then, claimed.again) == (None, False)
    assert (claimed.changes["drain_started_at"], claimed.changes["drain_deadline"]) == (T0, DEADLINE)
    assert not any(key.startswith("cordon_") for key in claimed.changes["extra"])
    node = server.get_object("nodes", NODE)
    assert node is not None
    assert node["spec"].get("unschedulable") is True


def test_a_cleanup_in_a_409_storm_gives_its_slot_back_and_ends_leaving_the_annotations_to_the_sweeper(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drained node, cordoned and annotated for its lifecycle, its action completed, and then a 409 storm
    # on the node's PATCH
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

    # When the cleanup runs, at each retry its outcome asks for, for a minute
    runs, record = run(step, record, T0, T0 + timedelta(seconds=60))

    # Then a conflict is read again at once, but the storm does not keep the slot: within seconds it is given
    # back and the lifecycle ends, the node's release told as refused (the alarm, a Warning event)
    at, last = runs[-1]
    assert (last.then, last.again) == (None, False)
    assert at <= T0 + timedelta(seconds=15)
    assert slots.released == [NODE]
    assert metrics.counts["EvictionErrors"] == 1
    assert (NODE, "ReleaseRefused", "Warning") in events.written
    # And what the lifecycle left on the node stays for the sweeper (its annotations) and the instance's end
    node = server.get_object("nodes", NODE)
    assert node is not None
    assert node["metadata"]["annotations"].get("nodecycle.io/owner") == record.owner
