"""A waiter whose budget the API server fails at the slot's ask, on the real adapters against the sandbox API server:
the budget's ConfigMap (read and written by the real budget store) answers every request 500, as an API server
whose etcd is overloaded does, while the node reads well. The failure was raised into the engine's backoff, which
for a step that is not yet a drain doubles up to 3 minutes a try, for as long as the failure lasted: the waiter
asked again minutes after the API server was back, its place in line expiring meanwhile, nobody told, and the
action held until its global timeout. Now it asks again within the waiters' cadence (from a poll up to its budget
retry, backing off with jitter, so that hundreds of waiters do not hammer a failing API server every poll), is told
once, and held while its action's time lasts: settled only where the action's global timeout would end it anyway,
as a waiter whose node cannot be read is (test_kube_drain_unread_nodes.py). Settled at its drain timeout, an API
server failing cluster-wide for longer than that ended every waiter's action at once, each instance terminated
undrained together (time waiting for a slot never counts against a drain's own timeout: invariant 9)."""

from __future__ import annotations

import itertools
from datetime import timedelta

from kubernetes import client

from nodecycle.adapters.kube.budget import ConfigMapBudgetStore, KubeNodeInventory
from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.budget import BudgetLimits, DisruptionBudget, SlotRequest
from nodecycle.domain.drain.common import _deadline_cap
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import Step
from nodecycle.domain.policy import Quantity
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE
from tests.integration.kube import test_kube_drain_steps as drain_steps
from tests.integration.kube.cluster import run_retrying
from tests.integration.kube.test_kube_drain_steps import INSTANCE, NODE, draining
from tests.support.fakes import T0, FakeClock, FakeMetrics
from tests.unit.drain.test_drain_steps import OWNER, FakeEvents, acquire, policy

SEED = drain_steps.SEED
OTHER = "ip-10-0-2-10.eu-west-1.compute.internal"  # the node that holds the budget's one slot
POLL = timedelta(seconds=policy().poll_seconds)
RETRY = timedelta(seconds=policy().budget_retry_seconds)
# the action's global timeout, from T0: its drain timeout three times over
ACTION_TIME = timedelta(minutes=40)


def budget_of_one(server: KubeServer) -> DisruptionBudget:
    """The budget in its ConfigMap, one slot, held by the other node's drain."""
    core = client.CoreV1Api(server.api_client())
    budget = DisruptionBudget(
        store=ConfigMapBudgetStore(lambda: core, NAMESPACE, sleep=lambda seconds: None),
        nodes=KubeNodeInventory(lambda: core),
        clock=FakeClock(T0),
        metrics=FakeMetrics(),
        limits=BudgetLimits(Quantity(value=1)),
        holder_ttl=timedelta(hours=3),
        count_unavailable=False,
        owner=OWNER,
    )
    other = draining(Step.EVICT).model_copy(
        update={"id": "i-other/terminate/token", "instance_id": "i-other"}
    )
    request = SlotRequest(OTHER, "i-other", "eu-west-1b", OWNER, other.id, other.token, other.received_at)
    assert budget.acquire(request).granted
    return budget


def test_a_waiter_whose_budget_fails_asks_again_backing_off_within_its_cadence_and_is_settled_only_near_its_end(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain waiting in line for the budget's one slot, and then an API server that fails every request of
    # the budget's ConfigMap (500)
    metrics, events = FakeMetrics(), FakeEvents()
    step = acquire(cluster, budget_of_one(server), metrics, events)  # type: ignore[arg-type]
    first = step(draining(Step.ACQUIRE_SLOT), T0)
    assert first.again, "the test's drain waits in line"
    record = draining(Step.ACQUIRE_SLOT).model_copy(update=dict(first.changes))
    record = record.model_copy(update={"global_deadline": T0 + ACTION_TIME})
    server.faults.arm([Fault("etcd", "kube-error", "* configmaps")], seed=1)

    # When it is run as the engine runs it (a failure raised is retried at the drain steps' cap), until its
    # action's global timeout
    start = T0 + RETRY
    runs, record = run_retrying(step, record, start, record.global_deadline)

    # Then it is never raised: it asks again no sooner than a poll (but at the timeout) and no later than its budget
    # retry, backing off
    # (far fewer asks than a poll's each) with jitter (hundreds of waiters do not ask in step); it is told once (a
    # Warning event, the alarm's metric); it still waits well past its drain timeout, and the action is settled
    # only at the latest a drain could begin before its global timeout, no slot taken and nothing of the node
    # touched
    assert server.faults.firings()
    assert all(isinstance(outcome, Outcome) for _, outcome in runs), runs
    delays = [(later - at).total_seconds() for (at, _), (later, _) in itertools.pairwise(runs)]
    assert all(delay <= RETRY.total_seconds() for delay in delays), delays
    assert all(delay >= POLL.total_seconds() for delay in delays[:-1]), (
        delays
    )  # (the last: up to the timeout)
    at, last = runs[-1]
    assert len(runs) < (at - start) / POLL / 3, delays
    assert len(set(delays)) > len(delays) // 2, delays
    assert isinstance(last, Outcome)
    assert (last.then, last.again) == (Step.COMPLETE, False)
    assert record.outcome == "drain-timeout-reads-refused"
    assert at > start + 2 * policy().timeout, "a waiter held past its drain timeout"
    assert _deadline_cap(record, policy()) <= at <= _deadline_cap(record, policy()) + RETRY
    reasons = [reason for _, reason, _ in events.written]
    assert (NODE, "DisruptionBudgetUnavailable", "Warning") in events.written
    assert (reasons.count("DisruptionBudgetUnavailable"), reasons.count("DrainTimeout")) == (1, 1)
    assert metrics.counts["EvictionErrors"] >= 1
    assert metrics.counts["DrainTimeouts"] == 1
    stored = server.get_object("nodes", NODE)
    assert stored is not None
    assert not stored["spec"].get("unschedulable")


def test_a_waiter_whose_budget_fails_for_less_than_a_poll_asks_again_untold_and_forgets_it_once_answered(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain waiting in line, and one request of the budget's ConfigMap that fails (500)
    metrics, events = FakeMetrics(), FakeEvents()
    step = acquire(cluster, budget_of_one(server), metrics, events)  # type: ignore[arg-type]
    record = draining(Step.ACQUIRE_SLOT).model_copy(
        update=dict(step(draining(Step.ACQUIRE_SLOT), T0).changes)
    )
    told = len(events.written)  # (its first ask's WaitingForDisruptionBudget)
    server.faults.arm([Fault("etcd", "kube-error", "GET configmaps", limit=1)], seed=1)

    # When it asks again, then once more at the delay asked
    blip = step(record, T0 + RETRY)
    record = record.model_copy(update=dict(blip.changes))
    back = step(record, T0 + RETRY + timedelta(seconds=blip.delay))

    # Then the blip is a poll's wait, untold, and forgotten once the budget answers (the next failure counts afresh)
    assert server.faults.firings()
    assert (blip.again, blip.delay) == (True, POLL.total_seconds())
    assert back.again
    assert not {key for key in back.changes["extra"] if key.startswith("ask_budget")}
    assert events.written[told:] == []
    assert "EvictionErrors" not in metrics.counts
    assert INSTANCE in str(record.id)
