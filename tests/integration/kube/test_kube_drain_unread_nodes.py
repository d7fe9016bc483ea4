"""The steps of a drain before its cordon whose node the API server will not show, on the real Kubernetes adapter
against the sandbox API server: every read of the node fails (500 ``etcdserver: request timed out``) or is refused
(403: RBAC), as in test_kube_drain_failing_node_reads.py for the cordon, the eviction and the cleanup.

At the slot's ask, the read was raised into the engine's backoff, which for a step that is not a drain yet doubles
up to 3 minutes a try, for as long as the failure lasted (a refusal: into the dead-letter queue after the refused
tries): the waiter asked again minutes after the API server was back, its place in line expiring meanwhile, and
nobody told. A slot-less cordon (a rebalance recommendation's ``cordon`` policy: no slot, the node found at the
cordon) raised its read into the engine's retries every few seconds with no deadline at all (no drain timeout runs
before the cordon). Each now asks again at the drain's poll cadence, tells, and is settled at the drain timeout
counted from its first failed read."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.acquire import AcquireSlot
from nodecycle.domain.drain.common import _deadline_cap
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import Step, Transition
from nodecycle.domain.nodes import NodeFinder
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube import test_kube_drain_steps as drain_steps
from tests.integration.kube.cluster import run, run_retrying
from tests.integration.kube.test_kube_drain_steps import INSTANCE, NODE, draining
from tests.support.fakes import T0, FakeMetrics, InMemoryRecords
from tests.unit.drain.test_drain_steps import (
    FakeEvents,
    FakeSlots,
    NoDns,
    acquire,
    cordon,
    policy,
    spot,
    wakes_to_nowhere,
)

SEED = drain_steps.SEED
OTHER = "ip-10-0-2-10.eu-west-1.compute.internal"  # the node that holds the budget's one slot
POLL = timedelta(seconds=policy().poll_seconds)
RETRY = timedelta(seconds=policy().budget_retry_seconds)
# the action's global timeout, from T0: its drain timeout three times over
ACTION_TIME = timedelta(minutes=40)


@pytest.mark.parametrize("answer", ["kube-error", "kube-forbidden"])
def test_a_waiter_whose_node_cannot_be_read_asks_again_backing_off_within_its_cadence_and_is_settled_near_its_end(
    cluster: KubeCluster, server: KubeServer, answer: str
) -> None:
    # Given a drain waiting in line for the budget's one slot (its node read at its first ask), and then an API
    # server that fails (500) or refuses (403) every read of the node
    slots, metrics, events = FakeSlots(room=1, holders={OTHER}), FakeMetrics(), FakeEvents()
    step = acquire(cluster, slots, metrics, events)
    first = step(draining(Step.ACQUIRE_SLOT), T0)
    assert first.again, "the test's drain waits in line"
    record = draining(Step.ACQUIRE_SLOT).model_copy(update=dict(first.changes))
    record = record.model_copy(update={"global_deadline": T0 + ACTION_TIME})
    server.faults.arm([Fault("etcd", answer, "GET nodes")], seed=1)

    # When it asks again at the delays its outcomes ask for, until its action's global timeout
    start = T0 + timedelta(seconds=30)
    runs, record = run(step, record, start, record.global_deadline)

    # Then it asks again no sooner than a poll and no later than its budget retry (never minutes apart), backing
    # off with jitter (held for the action's time, hundreds of waiters do not ask a failing API server every poll,
    # nor in step), is told once, still waits well past its drain timeout (time waiting for a slot is not the
    # drain's), and the action is settled only at the latest a drain could begin before its global timeout, no
    # slot taken and nothing of the node touched
    assert server.faults.firings()
    delays = [outcome.delay for _, outcome in runs[:-1]]
    assert all(POLL.total_seconds() <= delay <= RETRY.total_seconds() for delay in delays[:-1]), delays
    at, last = runs[-1]
    assert len(runs) < (at - start) / POLL / 3, delays
    assert len(set(delays)) > len(delays) // 2, delays
    assert (last.then, last.again) == (Step.COMPLETE, False)
    assert record.outcome == "drain-timeout-reads-refused"
    assert at > start + 2 * policy().timeout, "a waiter held past its drain timeout"
    assert _deadline_cap(record, policy()) <= at <= _deadline_cap(record, policy()) + POLL
    reasons = [reason for _, reason, _ in events.written]
    assert (NODE, "NodeUnreadable", "Warning") in events.written
    assert (reasons.count("NodeUnreadable"), reasons.count("DrainTimeout")) == (1, 1)
    assert metrics.counts["EvictionErrors"] >= 1
    assert metrics.counts["DrainTimeouts"] == 1
    assert NODE not in slots.holders
    stored = server.get_object("nodes", NODE)
    assert stored is not None
    assert not stored["spec"].get("unschedulable")


def test_a_waiter_whose_node_read_fails_for_less_than_a_poll_asks_again_untold_and_forgets_it_once_read(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain waiting in line, and one read of its node that fails (500)
    slots, metrics, events = FakeSlots(room=1, holders={OTHER}), FakeMetrics(), FakeEvents()
    step = acquire(cluster, slots, metrics, events)
    record = draining(Step.ACQUIRE_SLOT).model_copy(
        update=dict(step(draining(Step.ACQUIRE_SLOT), T0).changes)
    )
    told = len(events.written)  # (its first ask's WaitingForDisruptionBudget)
    server.faults.arm([Fault("etcd", "kube-error", "GET nodes", limit=1)], seed=1)

    # When it asks again, then once more at the delay asked
    blip = step(record, T0 + timedelta(seconds=30))
    record = record.model_copy(update=dict(blip.changes))
    back = step(record, T0 + timedelta(seconds=30 + blip.delay))

    # Then the blip is a poll's wait, untold, and forgotten once the node is read (the next failure counts afresh)
    assert server.faults.firings()
    assert (blip.again, blip.delay) == (True, POLL.total_seconds())
    assert back.again
    assert not set(back.changes["extra"]) & {"ask_unread", "ask_unread_told"}
    assert events.written[told:] == []
    assert "EvictionErrors" not in metrics.counts


@pytest.mark.parametrize("answer", ["kube-error", "kube-forbidden"])
def test_a_cordon_without_a_slot_whose_node_cannot_be_read_is_told_and_settled_at_its_timeout(
    cluster: KubeCluster, server: KubeServer, answer: str
) -> None:
    # Given a rebalance recommendation that this stack only cordons for (no slot: the node is found at the cordon),
    # and an API server that fails (500) or refuses (403) every read of the nodes
    plan = (Step.CORDON, Step.CLEANUP, Step.DONE)
    record = draining(Step.CORDON, transition=Transition.REBALANCE, plan=plan)
    record = record.model_copy(update={"id": f"{INSTANCE}/rebalance", "node": None})
    server.faults.arm([Fault("etcd", answer, "GET nodes")], seed=1)
    metrics, events = FakeMetrics(), FakeEvents()
    step = cordon(cluster, slots=FakeSlots(), metrics=metrics, events=events)

    # When the cordon is run as the engine runs it (a failure retried at the drain steps' cap), until well past
    # the drain timeout
    runs, record = run_retrying(step, record, T0, T0 + 3 * policy().timeout)

    # Then its time runs from its first try: it is told once (a Warning event, the alarm's metric), and at the drain
    # timeout it is settled (to its cleanup), nothing of the node touched
    assert server.faults.firings()
    at, last = runs[-1]
    assert isinstance(last, Outcome), last
    assert (last.then, last.again) == (Step.CLEANUP, False)
    assert record.outcome == "drain-timeout-cordon-refused"
    assert at <= T0 + policy().timeout + POLL
    reasons = [reason for _, reason, _ in events.written]
    assert (reasons.count("CordonRefused"), reasons.count("DrainTimeout")) == (1, 1)
    assert metrics.counts["EvictionErrors"] >= 1
    assert metrics.counts["DrainTimeouts"] == 1
    stored = server.get_object("nodes", NODE)
    assert stored is not None
    assert not stored["spec"].get("unschedulable")


def test_a_terminate_hook_after_a_drained_spot_interruption_drains_again_when_the_pods_cannot_be_listed(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given the Spot interruption's drain of the instance, over, and an API server that fails every list of pods
    # (500): whether pods came back to the node cannot be told
    records = InMemoryRecords()
    drained = spot(Step.DONE, node=NODE, zone="eu-west-1a", drain_started_at=T0, outcome="drained")
    records.create(
        drained.model_copy(update={"instance_id": INSTANCE, "id": f"{INSTANCE}/spot-interruption"})
    )
    server.faults.arm([Fault("etcd", "kube-error", "GET pods")], seed=1)
    slots = FakeSlots(room=1, holders={OTHER})
    step = AcquireSlot(
        finder=NodeFinder(cluster, NoDns()),
        cluster=cluster,
        slots=slots,
        dispatcher=wakes_to_nowhere(),
        policy=policy(),
        metrics=FakeMetrics(),
        events=FakeEvents(),
        records=records,
    )

    # When Auto Scaling's terminate hook for the same instance comes
    hook = draining(Step.ACQUIRE_SLOT).model_copy(update={"node": None})
    outcome = step(hook, T0 + timedelta(minutes=2))

    # Then it drains the node as any (here: waits in line for a slot), as when the list is refused, rather than
    # retried with the engine's backoff (minutes a try) for as long as the lists fail
    assert server.faults.firings()
    assert (outcome.then, outcome.again) == (None, True)
    assert outcome.changes["node"] == NODE
