"""A drain granted its slot whose cordon cannot confirm it, on the real adapters against the sandbox API server: the
budget's ConfigMap (read and written by the real budget store) answers every request 500, as an API server whose
etcd is overloaded does. The cordon confirms the slot in the document before it touches the node (invariants 1, 8),
and a renewal the API server refuses (403) is told and settled at the drain timeout (a waiter's deadline once its
slot expired unrenewed); a renewal that failed was
raised into the engine's retries every few seconds with no deadline (no drain time runs before the cordon), for as
long as the budget failed, nobody told (a retry is a metric, no alarm), the action held until its global timeout."""

from __future__ import annotations

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
from tests.integration.kube.test_kube_drain_steps import DEADLINE, INSTANCE, NODE, draining
from tests.support.fakes import T0, FakeClock, FakeMetrics
from tests.unit.drain.test_drain_steps import OWNER, FakeEvents, cordon, policy

SEED = drain_steps.SEED
POLL = timedelta(seconds=policy().poll_seconds)


def test_a_cordon_whose_budget_slot_cannot_be_confirmed_is_told_and_settled_at_its_timeout(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain granted its slot by the budget in its ConfigMap, at its cordon, and then an API server that fails
    # every request of the ConfigMap (500)
    core = client.CoreV1Api(server.api_client())
    budget = DisruptionBudget(
        store=ConfigMapBudgetStore(lambda: core, NAMESPACE, sleep=lambda seconds: None),
        nodes=KubeNodeInventory(lambda: core),
        clock=FakeClock(T0),
        metrics=FakeMetrics(),
        limits=BudgetLimits(Quantity(value=1)),
        holder_ttl=timedelta(minutes=10),
        count_unavailable=False,
        owner=OWNER,
    )
    record = draining(Step.CORDON, zone="eu-west-1a", global_deadline=T0 + 3 * policy().timeout)
    request = SlotRequest(NODE, INSTANCE, "eu-west-1a", OWNER, record.id, record.token, record.received_at)
    assert budget.acquire(request).granted
    server.faults.arm([Fault("etcd", "kube-error", "* configmaps")], seed=1)
    metrics, events = FakeMetrics(), FakeEvents()
    step = cordon(cluster, slots=budget, metrics=metrics, events=events)

    # When the cordon is run as the engine runs it, from T0 until the action's global timeout
    runs, record = run_retrying(step, record, T0, record.global_deadline)

    # Then it is told once (a Warning event, the alarm's metric), and the action is settled, the node never cordoned
    # without its slot confirmed: not at its drain timeout, by when its slot, never renewed from the first try, has
    # expired (its holder TTL is the drain timeout here) and may be another node's, but as a waiter for a slot, at
    # the latest its timeout policy may act before the global timeout (see test_budget_renewal_refused_at_cordon)
    assert server.faults.firings()
    at, last = runs[-1]
    assert isinstance(last, Outcome), last
    assert last.then is Step.COMPLETE
    assert record.outcome == "drain-timeout-cordon-refused"
    cap = _deadline_cap(record, policy())
    assert DEADLINE < cap <= at <= cap + POLL
    assert [reason for _, reason, _ in events.written].count("CordonRefused") == 1
    assert metrics.counts["EvictionErrors"] >= 1
    assert metrics.counts["DrainTimeouts"] == 1
    stored = server.get_object("nodes", NODE)
    assert stored is not None
    assert not stored["spec"].get("unschedulable")
