"""The state change's FORGET_NODE (an instance stopped or terminated outside the hooks) while the API server fails the
budget's ConfigMap (500, as an etcd that times out), on the real adapters against the sandbox API server: the slot
the instance held is what the step frees for the waiters. The failure was raised into the engine's backoff
(FORGET_NODE is no draining step: doubling up to 3 minutes a try), so a budget back after a minute found the slot
freed minutes later. Now it is asked again within the drain's cadence (a poll, backing off with jitter up to the
waiters' retry), freed as soon as the budget answers, and at the drain timeout the step ends, the slot left to its
holder's expiry and the sweeper, rather than retried for ever unseen."""

from __future__ import annotations

import itertools
from datetime import timedelta

from kubernetes import client

from nodecycle.adapters.kube.budget import ConfigMapBudgetStore, KubeNodeInventory
from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.budget import BudgetLimits, DisruptionBudget, SlotRequest
from nodecycle.domain.drain.forget import ForgetNode
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import LifecycleRecord, Step, Transition
from nodecycle.domain.nodes import NodeFinder
from nodecycle.domain.policy import Quantity
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE
from tests.integration.kube import test_kube_drain_steps as drain_steps
from tests.integration.kube.cluster import run_retrying
from tests.integration.kube.test_kube_drain_steps import INSTANCE, NODE, draining
from tests.support.fakes import T0, FakeClock, FakeMetrics
from tests.unit.drain.test_drain_steps import OWNER, NoDns, policy, spot, wakes_to_nowhere

SEED = drain_steps.SEED
POLL = timedelta(seconds=policy().poll_seconds)
RETRY = timedelta(seconds=policy().budget_retry_seconds)


def held_by_its_drain(server: KubeServer) -> DisruptionBudget:
    """The budget in its ConfigMap, the instance's drain holding a slot."""
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
    drain = draining(Step.EVICT)
    request = SlotRequest(NODE, INSTANCE, "eu-west-1a", OWNER, drain.id, drain.token, drain.received_at)
    assert budget.acquire(request).granted
    return budget


def holders(server: KubeServer) -> str:
    stored = server.get_object("configmaps", "nodecycle-budget", NAMESPACE)
    assert stored is not None
    return str(stored["data"].get("budget.json", ""))


def stopped() -> LifecycleRecord:
    return spot(
        Step.FORGET_NODE,
        transition=Transition.STATE_CHANGE,
        id=f"{INSTANCE}/state-change",
        instance_id=INSTANCE,
    )


def forget(cluster: KubeCluster, budget: DisruptionBudget) -> ForgetNode:
    return ForgetNode(
        finder=NodeFinder(cluster, NoDns()),
        cluster=cluster,
        slots=budget,
        dispatcher=wakes_to_nowhere(),
        instances=NoDns(),
        policy=policy(),
    )


def test_a_stop_whose_budget_fails_asks_again_within_the_cadence_and_ends_at_the_timeout(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given the instance's drain holding its slot, and then an API server failing every request of the ConfigMap
    step = forget(cluster, held_by_its_drain(server))
    server.faults.arm([Fault("etcd", "kube-error", "* configmaps")], seed=1)

    # When the state change of the instance comes to free its slot, run as the engine runs it until well past the
    # drain timeout
    runs, record = run_retrying(step, stopped(), T0, T0 + 3 * policy().timeout)

    # Then it is never raised: it asks again within the drain's cadence, backing off, and at the drain timeout
    # counted from its first failure it ends, the slot left to its expiry and the sweeper
    assert server.faults.firings()
    assert all(isinstance(outcome, Outcome) for _, outcome in runs), runs
    delays = [(later - at).total_seconds() for (at, _), (later, _) in itertools.pairwise(runs)]
    assert all(delay <= RETRY.total_seconds() for delay in delays), delays
    assert all(delay >= POLL.total_seconds() for delay in delays[:-1]), delays
    assert len(runs) < policy().timeout / POLL / 3, delays
    at, last = runs[-1]
    assert isinstance(last, Outcome)
    assert (last.then, last.again) == (None, False)
    assert record.outcome == "budget-unavailable"
    assert T0 + policy().timeout <= at <= T0 + policy().timeout + POLL
    server.faults.disarm()
    assert INSTANCE in holders(server)


def test_a_stop_whose_budget_failed_a_while_frees_the_slot_once_it_answers(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given the instance's drain holding its slot, and an API server failing every request of the ConfigMap
    step = forget(cluster, held_by_its_drain(server))
    server.faults.arm([Fault("etcd", "kube-error", "* configmaps")], seed=1)

    # When the state change is run while the budget fails, then once more, at the delay asked, once it answers
    record = stopped()
    failed = step(record, T0)
    record = record.model_copy(update=dict(failed.changes))
    server.faults.disarm()
    answered = step(record, T0 + timedelta(seconds=failed.delay))

    # Then it waited a poll, not the engine's backoff, and frees the slot at its next try
    assert (failed.again, failed.delay) == (True, POLL.total_seconds())
    assert (answered.then, answered.again) == (None, False)
    assert answered.changes["outcome"] == "instance-gone-without-hook"
    assert INSTANCE not in holders(server)
