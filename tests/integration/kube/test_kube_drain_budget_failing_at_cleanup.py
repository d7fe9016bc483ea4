"""A cleanup whose slot cannot be given back for a while, on the real adapters against the sandbox API server: the
budget's ConfigMap (read and written by the real budget store) answers every request 500, as an API server whose
etcd is overloaded does. The release was raised into the engine's backoff, which for a cleanup (no draining step)
doubles up to 3 minutes a try: an API server back after a minute or two found the slot given back only at the
cleanup's next try, minutes later, held idle meanwhile while nodes waited for it (invariant 10). It is asked again
at a drain's retry cadence instead, the node's release not repeated."""

from __future__ import annotations

from datetime import timedelta

from kubernetes import client

from nodecycle.adapters.kube.budget import ConfigMapBudgetStore, KubeNodeInventory
from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.budget import BudgetLimits, DisruptionBudget, SlotRequest
from nodecycle.domain.drain.cleanup import Cleanup
from nodecycle.domain.engine import DRAIN_RETRY_CAP_SECONDS
from nodecycle.domain.model import Step
from nodecycle.domain.policy import Quantity
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE
from tests.integration.kube import test_kube_drain_steps as drain_steps
from tests.integration.kube.test_kube_drain_steps import INSTANCE, NODE, draining
from tests.support.fakes import T0, FakeAutoscaling, FakeClock, FakeMetrics
from tests.unit.drain.test_drain_steps import OWNER, Ec2Maintenance, FakeEvents, cordon, wakes_to_nowhere

SEED = drain_steps.SEED


def test_a_cleanup_whose_slot_cannot_be_given_back_asks_again_within_seconds(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain over, its action completed, at its cleanup holding its slot in the budget's ConfigMap, and then
    # an API server that fails every request of the ConfigMap (500)
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
    record = draining(Step.CORDON, zone="eu-west-1a")
    request = SlotRequest(NODE, INSTANCE, "eu-west-1a", OWNER, record.id, record.token, record.received_at)
    assert budget.acquire(request).granted
    claimed = cordon(cluster, slots=budget)(record, T0)
    record = record.model_copy(
        update={
            "step": Step.CLEANUP,
            "outcome": "drained",
            "completed_at": T0,
            "result": "CONTINUE",
            **claimed.changes,
        }
    )
    server.faults.arm([Fault("etcd", "kube-error", "* configmaps")], seed=1)
    step = Cleanup(
        cluster=cluster,
        slots=budget,
        dispatcher=wakes_to_nowhere(),
        autoscaling=FakeAutoscaling(),
        metrics=FakeMetrics(),
        events=FakeEvents(),
        instances=Ec2Maintenance(),
    )

    # When the cleanup runs, and again at the delay it asks once the API server is back
    failed = step(record, T0)
    server.faults.disarm()
    record = record.model_copy(update=dict(failed.changes))
    done = step(record, T0 + timedelta(seconds=failed.delay))

    # Then the failed release waits a drain's retry, not minutes, and the next gives the slot back
    assert failed.again
    assert failed.delay <= DRAIN_RETRY_CAP_SECONDS
    assert (done.then, done.again) == (None, False)
    assert budget.acquire(
        SlotRequest("other", "i-other", "eu-west-1a", OWNER, "i-other/terminate/t", "t", T0)
    ).granted
    stored = server.get_object("nodes", NODE)
    assert stored is not None
    assert "nodecycle.io/owner" not in (stored["metadata"].get("annotations") or {})
