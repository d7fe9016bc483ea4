"""A drain whose node something else keeps uncordoning, on the real Kubernetes adapter against the sandbox API
server: a tool that owns the nodes' spec (a GitOps controller that self-heals ``unschedulable: false``, another
maintenance operator) reverts each cordon at once. Each poll of the drain finds its cordon undone and cordons
again, as it must before any more eviction; but a fight that goes on past the drain's timeout must not keep the
drain from its timeout policy: the action settles by it (invariant 2), not only at its global timeout, and no
slot stays held for a drain that cannot end (invariant 10)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from kubernetes.client import CoreV1Api

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.evict import FORCED_POD_SLACK, Evict
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube import test_kube_drain_steps as drain_steps
from tests.integration.kube.cluster import FORCE_GRACE, evict_step
from tests.integration.kube.test_kube_drain_steps import DEADLINE, INSTANCE, NODE, draining
from tests.support.fakes import T0
from tests.unit.drain.test_drain_steps import FakeEvents, FakeSlots, cordon, policy

SEED = drain_steps.SEED


@pytest.mark.parametrize("on_timeout", ["force", "continue"])
def test_a_drain_whose_cordon_is_undone_at_every_turn_meets_its_timeout_policy(
    cluster: KubeCluster, server: KubeServer, on_timeout: str
) -> None:
    # Given a drain cordoned at T0, a few seconds before its deadline, and a controller that uncordons the node
    # right after each cordon
    slots = FakeSlots(holders={NODE})
    claim = cordon(cluster, slots=slots)
    record = draining(Step.CORDON, zone="eu-west-1a")
    record = record.model_copy(update={**claim(record, T0).changes, "step": Step.EVICT})
    assert record.drain_deadline == DEADLINE
    evict = evict_step(cluster, NODE, INSTANCE, slots=slots, drain_policy=policy(timeout_policy=on_timeout))
    record = record.model_copy(update={"extra": {**record.extra, "polls": 3}})

    # When the drain runs from a few seconds before its deadline on, its steps each a second apart at least (a
    # delivery), the node uncordoned after each cordon
    runs, record = fight(
        server, claim, evict, record, DEADLINE - timedelta(seconds=3), DEADLINE + timedelta(minutes=2)
    )
    last = runs[-1][2]

    # Then the drain ends by its timeout policy: continue at its first poll past the deadline, force within its
    # grace and slack (and the poll that finds them over, a second or two of the fight's turns later)
    end_at, end_step, _ = runs[-1]
    assert (end_step, last.then, last.again) == (Step.EVICT, None, False), runs[-3:]
    if on_timeout == "continue":
        assert (record.outcome, end_at <= DEADLINE + timedelta(seconds=5 + 1)) == (
            "drain-timeout-continued",
            True,
        )
    else:
        assert record.outcome == "drain-timeout-forced-incomplete"
        assert end_at <= DEADLINE + FORCE_GRACE + FORCED_POD_SLACK + timedelta(seconds=10)


def _advanced(record: LifecycleRecord, outcome: Outcome) -> LifecycleRecord:
    """The record after ``outcome``: its changes, and the step it goes to (EVICT after the cordon)."""
    step = record.step
    if outcome.then is not None:
        step = outcome.then
    elif not outcome.again:
        step = Step.EVICT if record.step is Step.CORDON else Step.COMPLETE
    return record.model_copy(update={**dict(outcome.changes), "step": step})


def test_a_cordon_undone_at_every_turn_is_asked_again_at_the_poll_interval_not_at_once(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain cordoned at T0, and a controller that uncordons the node right after each cordon
    slots, events = FakeSlots(holders={NODE}), FakeEvents()
    claim = cordon(cluster, slots=slots, events=events)
    record = draining(Step.CORDON, zone="eu-west-1a")
    record = record.model_copy(update={**claim(record, T0).changes, "step": Step.EVICT})
    evict = evict_step(cluster, NODE, INSTANCE, slots=slots)

    # When the fight goes on for a minute, well before the drain's deadline
    runs, _ = fight(server, claim, evict, record, T0 + timedelta(seconds=1), T0 + timedelta(seconds=61))

    # Then the node is cordoned again at the poll interval (5 s), not at every turn of the fight: each cordon is
    # a PATCH and an Event, and each turn a run of the function
    cordons = [at for at, step, outcome in runs if step is Step.CORDON and not outcome.again]
    assert len(cordons) <= 60 / 5 + 2, cordons
    assert len(cordons) >= 5, "the node is still cordoned again while the fight goes on"


def fight(
    server: KubeServer,
    claim: object,
    evict: Evict,
    record: LifecycleRecord,
    start: datetime,
    until: datetime,
) -> tuple[list[tuple[datetime, Step, Outcome]], LifecycleRecord]:
    """The drain's CORDON and EVICT steps run from ``start`` as its queue would deliver them (a second apart at
    least) until the drain moves on from EVICT or ``until`` has passed, the node uncordoned after each cordon:
    each run's time, step and outcome, and the record after the last."""
    admin = CoreV1Api(server.api_client())

    def uncordon() -> None:
        admin.patch_node(NODE, {"spec": {"unschedulable": False}})

    uncordon()
    at = start
    runs: list[tuple[datetime, Step, Outcome]] = []
    while at <= until:
        step = claim if record.step is Step.CORDON else evict
        outcome = step(record, at)  # type: ignore[operator]
        runs.append((at, record.step, outcome))
        record = _advanced(record, outcome)
        if runs[-1][1] is Step.CORDON and not outcome.again:
            uncordon()
        if runs[-1][1] is Step.EVICT and outcome.then is None and not outcome.again:
            break
        at += timedelta(seconds=max(outcome.delay, 1))
    return runs, record
