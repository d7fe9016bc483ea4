"""The state change's FORGET_NODE (an instance stopped or terminated outside the hooks) while AWS refuses the
drain function its EC2 reads (a service control policy or a permissions boundary denying ec2:DescribeInstances),
on the real adapters: EC2 on moto behind the sandbox's AWS fault layer, the node on the sandbox API server. The
step asks EC2 first whether the instance is still down (a late message must not free what a newer lifecycle of an
instance up again holds). Refused, it cannot tell: it frees nothing, says so, and ends, what it would have freed
left to the drain's own cleanup and the sweeper. Before, it raised the refusal at every try, and the engine failed
its message into the dead-letter queue after its refused tries."""

from __future__ import annotations

from nodecycle.adapters.aws.instances import Ec2Instances
from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.model import Step
from nodecycle_sandbox.aws.faults import FAULTS
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube import test_kube_drain_steps as drain_steps
from tests.integration.kube.test_drain_ec2_forget_throttled import forget, stopped
from tests.integration.kube.test_drain_ec2_instance_state import instances
from tests.integration.kube.test_kube_drain_steps import NODE, draining
from tests.support.fakes import T0
from tests.unit.drain.test_drain_steps import FakeSlots, cordon

SEED = drain_steps.SEED
__all__ = ["instances"]  # (the fixture: EC2 refusing the drain function every DescribeInstances)


def test_a_stop_whose_instance_state_ec2_refuses_frees_nothing_and_ends(
    cluster: KubeCluster, server: KubeServer, instances: Ec2Instances
) -> None:
    # Given the instance's node claimed by its drain, holding its slot, and EC2 refusing the drain function every
    # DescribeInstances
    drained = draining(Step.CORDON)
    cordon(cluster)(drained, T0)
    server.settle()  # (the node lifecycle controller's unschedulable taint of the cordoned node, a write of its own)
    slots = FakeSlots(holders={NODE}, held_for={NODE: drained.id})
    before = server.get_object("nodes", NODE)
    assert before is not None

    # When the state change of the instance (stopped outside the hooks) comes to free what nodecycle held for it
    outcome = forget(cluster, instances, slots)(stopped(), T0)

    # Then, unable to tell whether the instance is up again, it frees nothing and ends, saying why
    assert FAULTS.counts().get("aws-denied", 0) >= 1, "EC2 refused the step"
    assert (outcome.then, outcome.again) == (None, False)
    assert outcome.changes["outcome"] == "instance-state-refused"
    assert slots.forgotten == []
    after = server.get_object("nodes", NODE)
    assert after is not None
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
