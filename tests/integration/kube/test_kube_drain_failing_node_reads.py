"""A drain past its timeout whose node the API server will not show, on the real Kubernetes adapter against the
sandbox API server: every read of the node fails (500 ``etcdserver: request timed out``, as an API server whose
etcd is overloaded answers), and every poll of the drain starts with that read. Retried as any transient failure,
the drain would hold its action until the global timeout and never apply its timeout policy; a drain whose pods
cannot be listed past its timeout applies it on what can be known (see ``Evict._timed_out_unlisted``), and one
whose node cannot be read must too (invariant 2: the action settled by its drain's timeout policy; invariant 10:
no slot kept past the timeout, the force grace and a margin).

So too before the first cordon: a drain granted its slot whose node cannot be read at its cordon. The cordon's
read was raised into the engine's retries every few seconds with no deadline (a drain's time starts at its
cordon): the slot held idle, not renewed, until its holder expired, the action held until the global-timeout
guard completed it hours later, and nobody told (a retry is a metric, no alarm). And after the drain: a cleanup
whose node cannot be read gives its slot back only after the release of the node, and held it, retried with the
engine's backoff, until its holder expired (invariant 10), where a release that fails is given up after a few
seconds, told, and the slot given back."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.cleanup import RELEASE_FAILING_FOR
from nodecycle.domain.drain.common import _deadline_cap
from nodecycle.domain.drain.evict import FORCED_POD_SLACK
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import Step
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube import test_kube_drain_steps as drain_steps
from tests.integration.kube.cluster import FORCE_GRACE, evict_step, run, run_retrying
from tests.integration.kube.test_kube_drain_steps import DEADLINE, INSTANCE, NODE, draining
from tests.support.fakes import T0, FakeAutoscaling, FakeMetrics
from tests.unit.drain.test_drain_steps import FakeEvents, FakeSlots, cleanup, cordon, policy

SEED = drain_steps.SEED


@pytest.mark.parametrize("on_timeout", ["force", "continue"])
def test_a_drain_whose_node_cannot_be_read_past_its_timeout_applies_its_timeout_policy(
    cluster: KubeCluster, server: KubeServer, on_timeout: str
) -> None:
    # Given a drain at its timeout, its pods asked to leave once, and an API server that fails every read of the
    # node (its pods' list still answers)
    server.faults.arm([Fault("etcd", "kube-error", "GET nodes")], seed=1)
    metrics, events = FakeMetrics(), FakeEvents()
    step = evict_step(
        cluster,
        NODE,
        INSTANCE,
        metrics=metrics,
        events=events,
        drain_policy=policy(timeout_policy=on_timeout),
    )

    # When the drain polls from its deadline on, at the delays its outcomes ask for
    runs, record = run(step, draining(extra={"polls": 1}), DEADLINE, DEADLINE + timedelta(minutes=10))

    # Then its timeout policy ends it on what can be known: continue at once, force once the force grace and its
    # slack are over, told once as a drain timeout
    at, last = runs[-1]
    assert (last.then, last.again) == (None, False)
    assert record.outcome == "drain-timeout-unlisted"
    if on_timeout == "continue":
        assert at == DEADLINE
    else:
        assert at <= DEADLINE + FORCE_GRACE + FORCED_POD_SLACK + timedelta(seconds=5)
    assert metrics.counts["DrainTimeouts"] == 1
    assert [reason for _, reason, _ in events.written].count("DrainTimeout") == 1
    assert server.faults.firings()


def test_a_drain_whose_node_cannot_be_read_before_its_timeout_is_retried(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain before its timeout, and an API server that fails every read of the node
    server.faults.arm([Fault("etcd", "kube-error", "GET nodes")], seed=1)
    step = evict_step(cluster, NODE, INSTANCE)

    # When the drain polls, Then the failure is the step's, retried by the engine: its timeout is still ahead
    with pytest.raises(Exception, match="etcdserver: request timed out"):
        step(draining(extra={"polls": 1}), DEADLINE - timedelta(seconds=1))


@pytest.mark.parametrize("answer", ["kube-error", "kube-forbidden"])
def test_a_drain_whose_node_cannot_be_read_at_its_cordon_is_told_and_settled_at_its_timeout(
    cluster: KubeCluster, server: KubeServer, answer: str
) -> None:
    # Given a drain granted its slot, at its cordon, and an API server that fails (500) or refuses (403: RBAC)
    # every read of the node
    found = server.get_object("nodes", NODE)
    assert found is not None
    record = draining(
        Step.CORDON, node_uid=found["metadata"]["uid"], global_deadline=T0 + 3 * policy().timeout
    )
    server.faults.arm([Fault("reads", answer, "GET nodes")], seed=1)
    metrics, events = FakeMetrics(), FakeEvents()
    slots = FakeSlots(holders={NODE}, held_for={NODE: record.id})
    step = cordon(cluster, slots=slots, metrics=metrics, events=events)

    # When the cordon is run as the engine runs it, from T0 until the action's global timeout
    runs, record = run_retrying(step, record, T0, record.global_deadline)

    # Then it is told once (a Warning event, the alarm's metric), and the action is settled, nothing of the node
    # touched: not at its drain timeout, past the expiry of its slot, never renewed from the first try (its holder TTL
    # is the drain timeout here), but as a waiter for a slot, at the latest its timeout policy may act before the
    # global timeout (another node may have been granted the expired slot: see test_budget_renewal_refused_at_cordon)
    assert server.faults.firings()
    at, last = runs[-1]
    assert isinstance(last, Outcome), last
    assert last.then is Step.COMPLETE
    assert record.outcome == "drain-timeout-cordon-refused"
    cap = _deadline_cap(record, policy())
    assert DEADLINE < cap <= at <= cap + timedelta(seconds=policy().poll_seconds)
    assert [reason for _, reason, _ in events.written].count("CordonRefused") == 1
    assert metrics.counts["EvictionErrors"] >= 1
    assert metrics.counts["DrainTimeouts"] == 1
    stored = server.get_object("nodes", NODE)
    assert stored is not None
    assert not stored["spec"].get("unschedulable")


@pytest.mark.parametrize("answer", ["kube-error", "kube-forbidden"])
def test_a_cleanup_whose_node_cannot_be_read_gives_its_slot_back_and_tells(
    cluster: KubeCluster, server: KubeServer, answer: str
) -> None:
    # Given a drain over, its action completed, at its cleanup holding its slot, and an API server that fails (500)
    # or refuses (403: RBAC) every read of the node
    found = server.get_object("nodes", NODE)
    assert found is not None
    record = draining(
        Step.CLEANUP, node_uid=found["metadata"]["uid"], outcome="drained", completed_at=T0, result="CONTINUE"
    )
    server.faults.arm([Fault("reads", answer, "GET nodes")], seed=1)
    metrics, events = FakeMetrics(), FakeEvents()
    slots = FakeSlots(holders={NODE}, held_for={NODE: record.id})
    step = cleanup(cluster, slots, FakeAutoscaling(), events, metrics=metrics)

    # When the cleanup is run as the engine runs it for a minute
    runs, _ = run_retrying(step, record, T0, T0 + timedelta(minutes=1))

    # Then, tried again at once for a few seconds (refused: not at all), the release is given up: told, and the slot
    # given back
    assert server.faults.firings()
    at, last = runs[-1]
    assert isinstance(last, Outcome), last
    assert (last.then, last.again) == (None, False)
    assert at <= T0 + RELEASE_FAILING_FOR + timedelta(seconds=2)
    assert slots.released == [NODE]
    assert (NODE, "ReleaseRefused", "Warning") in events.written
    assert metrics.counts["EvictionErrors"] == 1
