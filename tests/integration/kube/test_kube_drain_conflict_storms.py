"""A node's PATCH that keeps failing, on the real Kubernetes adapter against the sandbox API server: the drain's
cordon and its cleanup write the node, and each failure alone is transient.

- A 409 storm: the cordon and the cleanup write the node with its resourceVersion (so that no other owner's claim
  is overwritten), and a node that something else keeps changing (a controller that rewrites its labels or
  annotations, a flapping condition) answers each of them 409 Conflict. One conflict is a concurrent writer,
  read again at once.
- A validating webhook on nodes that is down (``failurePolicy: Fail``: every node PATCH answered 500 ``failed
  calling webhook``): a policy engine guarding nodes whose pods crashed is a classic stuck drain.

Retried as transient, either never ends: the cordon's would keep the drain's time from ever starting (the action
held until its global timeout), the cleanup's would keep the slot until its holder expires. A failure that goes
on is told and treated as the refusal it is by then: it must not keep the drain outside its timeout (invariant 2:
the action settles by its drain's timeout policy, not only at its global timeout) nor a slot held after its
lifecycle is over (invariant 10)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import Step
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube import test_kube_drain_steps as drain_steps
from tests.integration.kube.cluster import run, run_retrying
from tests.integration.kube.test_kube_drain_steps import DEADLINE, NODE, draining, on_its_way_out, web_pods
from tests.support.fakes import T0, FakeAutoscaling, FakeMetrics
from tests.unit.drain.test_drain_steps import FakeEvents, FakeSlots, cleanup, cordon

__all__ = ["run"]  # (imported from here by other drain tests)

SEED = drain_steps.SEED
STORM = Fault("storm", "kube-conflict", "PATCH nodes")  # every PATCH of a node that names its version: 409
WEBHOOK_DOWN = Fault("webhook", "kube-webhook-down", "PATCH nodes")
FAULTS = pytest.mark.parametrize("fault", [STORM, WEBHOOK_DOWN], ids=["409-storm", "webhook-down"])


@FAULTS
def test_a_cordon_whose_node_patch_keeps_failing_is_settled_at_the_drain_timeout(
    cluster: KubeCluster, server: KubeServer, fault: Fault
) -> None:
    # Given a node whose every PATCH fails (a 409 storm, a webhook that is down), for longer than the drain
    # timeout
    server.faults.arm([fault], seed=1)
    slots, metrics, events = FakeSlots(holders={NODE}), FakeMetrics(), FakeEvents()
    step = cordon(cluster, slots=slots, metrics=metrics, events=events)

    # When the drain cordons it, at each retry its outcome asks for (or the engine's, after the webhook's
    # transient failure: a conflict is never one), until past its drain timeout
    record = draining(Step.CORDON, zone="eu-west-1a")
    until = DEADLINE + timedelta(seconds=60)
    runs, _ = run_retrying(step, record, T0, until, transient=fault is WEBHOOK_DOWN)

    # Then the failure is told once and raised to the alarm, the slot renewed while it lasts
    assert [reason for _, reason, _ in events.written].count("CordonRefused") == 1
    assert metrics.counts["EvictionErrors"] >= 1
    assert slots.requests, "the slot is renewed while the cordon is asked again"
    assert len(runs) < 600 / 5 + 10
    if fault is STORM:
        # (the first conflict read again at once, a concurrent writer; the storm then asked again at the poll
        # interval)
        (_, first), *_ = runs
        assert isinstance(first, Outcome), first
        assert (first.again, first.delay) == (True, 1)
    else:
        assert any("failed calling webhook" in message for message in events.messages)
    # And the action is settled by the drain's timeout, counted from the first try, without any eviction
    at, last = runs[-1]
    assert isinstance(last, Outcome), last
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


# (no 409 storm: a release names no version, a storm of other writers does not reach it; see
# test_release_in_a_conflict_storm.py)
@pytest.mark.parametrize("fault", [WEBHOOK_DOWN], ids=["webhook-down"])
def test_a_cleanup_whose_node_patch_keeps_failing_gives_its_slot_back_and_ends_leaving_the_annotations_to_the_sweeper(
    cluster: KubeCluster, server: KubeServer, fault: Fault
) -> None:
    # Given a drained node, cordoned and annotated for its lifecycle, its action completed, and then the node's
    # PATCH failing (a 409 storm, a webhook that is down)
    record = draining(Step.CORDON)
    claimed = cordon(cluster)(record, T0)
    record = record.model_copy(update={"step": Step.CLEANUP, "outcome": "drained", **claimed.changes})
    server.faults.arm([fault], seed=1)
    slots, metrics, events = (
        FakeSlots(holders={NODE}, held_for={NODE: record.id}),
        FakeMetrics(),
        FakeEvents(),
    )
    step = cleanup(cluster, slots, FakeAutoscaling(), events, metrics=metrics)

    # When the cleanup runs, at each retry its outcome asks for (or the engine's, after the webhook's transient
    # failure), for a minute
    runs, _ = run_retrying(step, record, T0, T0 + timedelta(seconds=60), transient=fault is WEBHOOK_DOWN)

    # Then the failure does not keep the slot: within seconds it is given back and the lifecycle ends, the node's
    # release told as refused (the alarm, a Warning event)
    at, last = runs[-1]
    assert isinstance(last, Outcome), last
    assert (last.then, last.again) == (None, False)
    assert at <= T0 + timedelta(seconds=15)
    assert slots.released == [NODE]
    assert metrics.counts["EvictionErrors"] == 1
    assert (NODE, "ReleaseRefused", "Warning") in events.written
    # And what the lifecycle left on the node stays for the sweeper (its annotations) and the instance's end
    node = server.get_object("nodes", NODE)
    assert node is not None
    assert node["metadata"]["annotations"].get("nodecycle.io/owner") == record.owner
