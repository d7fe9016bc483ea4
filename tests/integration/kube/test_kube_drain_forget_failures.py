"""The state change of an instance gone without a hook (stopped, terminated, reclaimed) frees what nodecycle held for
it, its node's annotations and its budget slot (FORGET_NODE), on the real Kubernetes adapter against the sandbox API
server, while the node's PATCH keeps failing (a 409 storm: something rewrites the node at every turn; a validating
webhook on nodes that is down) or its reads fail (500). The slot needs no node (instance ids are never reused), and
a refused release already frees it (test_kube_drain_budgets.py). A conflict was tried again every second for as long
as the storm lasted, and a failure raised into the engine's backoff (FORGET_NODE is no draining step: minutes a
try), the slot held all the while; now either is tried again at once for a few seconds, then the annotations are
left to the sweeper and the slot freed."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.cleanup import RELEASE_FAILING_FOR
from nodecycle.domain.drain.forget import ForgetNode
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import Step, Transition
from nodecycle.domain.nodes import NodeFinder
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube import test_kube_drain_steps as drain_steps
from tests.integration.kube.cluster import run_retrying
from tests.integration.kube.test_kube_drain_budgets import claimed_by_its_drain
from tests.integration.kube.test_kube_drain_steps import INSTANCE, NODE
from tests.support.fakes import T0
from tests.unit.drain.test_drain_steps import NoDns, policy, spot, wakes_to_nowhere

SEED = drain_steps.SEED


@pytest.mark.parametrize(
    "fault",
    # (no 409 storm: a release names no version, a storm of other writers does not reach it; see
    # test_release_in_a_conflict_storm.py)
    [
        Fault("webhook", "kube-webhook-down", "PATCH nodes"),
        Fault("etcd", "kube-error", "GET nodes"),
    ],
    ids=["webhook-down", "reads-fail"],
)
def test_an_instance_gone_without_a_hook_frees_its_slot_within_seconds_though_its_node_cannot_be_released(
    cluster: KubeCluster, server: KubeServer, fault: Fault
) -> None:
    # Given the instance's node claimed by its drain, which holds its slot, and then the node's every PATCH (or
    # every read) failing
    drained, slots = claimed_by_its_drain(cluster)
    server.faults.arm([fault], seed=1)

    # When the instance stops outside the hooks, and its state change is run as the engine runs it (a failure
    # retried within seconds: the engine waits longer for this step) for a minute
    stopped = spot(
        Step.FORGET_NODE,
        transition=Transition.STATE_CHANGE,
        id=f"{INSTANCE}/state-change",
        instance_id=INSTANCE,
    )
    step = ForgetNode(
        finder=NodeFinder(cluster, NoDns()),
        cluster=cluster,
        slots=slots,
        dispatcher=wakes_to_nowhere(),
        instances=NoDns(),
        policy=policy(),
    )
    runs, _ = run_retrying(step, stopped, T0, T0 + timedelta(minutes=1))

    # Then, tried again at once for a few seconds, the slot is freed; the annotations stay, for the sweeper
    assert server.faults.firings()
    at, last = runs[-1]
    assert isinstance(last, Outcome), last
    assert (last.then, last.again) == (None, False)
    assert at <= T0 + RELEASE_FAILING_FOR + timedelta(seconds=2)
    assert slots.forgotten == [INSTANCE]
    stored = server.get_object("nodes", NODE)
    assert stored is not None
    assert stored["metadata"]["annotations"].get("nodecycle.io/owner") == drained.owner
