"""The terminate drain while AWS refuses the drain function its EC2 reads (a service control policy or a
permissions boundary denying ec2:DescribeInstances): the instance on moto behind the sandbox's AWS fault layer,
its node and pods on the sandbox API server, the lifecycle run by the step engine on the test's clock, from the
slot's ask to the cleanup. The steps find the node as the launch's readiness gate does when the instance's DNS
name is refused (by its instance id's name, and by provider id), and drain it; the refusal of what they ask EC2
only to go faster (whether the instance is still up) is no reason to stop. Before, the slot's ask raised the
refusal at every try, and the engine failed its message into the dead-letter queue after its refused tries: the
node never drained, the action left to the sweeper's keep-alive and its global timeout."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config

from nodecycle.adapters.aws.instances import Ec2Instances
from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.adapters.kube.eks_access import EksCluster
from nodecycle.adapters.kube.events import KubeEvents
from nodecycle.domain.completion import CompleteAction
from nodecycle.domain.drain.acquire import AcquireSlot
from nodecycle.domain.drain.cleanup import Cleanup
from nodecycle.domain.drain.cordon import Cordon
from nodecycle.domain.drain.evict import Evict
from nodecycle.domain.engine import StepHandler
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.nodes import NodeFinder
from nodecycle.domain.policy import ActionResult
from nodecycle_sandbox.aws.faults import FAULTS
from nodecycle_sandbox.aws.server import MotoServer
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import drain_server, eks_describing
from tests.unit.drain.builders import no_end
from tests.unit.drain.test_drain_steps import FakeSlots, policy, terminating, wakes_to_nowhere
from tests.unit.foundation.test_engine import World

REGION = "eu-west-1"
DRAIN_KEY = "AKIADRAINFUNCTIO0001"  # the drain function's access key: the one the faults are armed for
OPERATOR_KEY = "AKIASANDBOXOPERATOR0"
DENIED = Fault("scp", "aws-denied", target="ec2.DescribeInstances")
MAX_MESSAGES = 400  # far more than a drain of a few pods takes: a lifecycle that never ends fails the test


@pytest.fixture
def ec2_endpoint() -> Iterator[str]:
    server = MotoServer()
    yield server.start()
    FAULTS.disarm()
    server.stop()


def ec2(endpoint: str, key: str) -> Any:
    return boto3.client(
        "ec2",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=key,
        aws_secret_access_key="secret",
        config=Config(retries={"mode": "standard"}),
    )


def drain_steps(
    world: World, cluster: KubeCluster, instances: Ec2Instances, events: KubeEvents
) -> dict[Step, StepHandler]:
    """The terminate drain's steps as the drain function wires them, on the real adapters; the budget in memory
    (one slot), its clock the test's."""
    slots = FakeSlots(clock=world.clock)
    finder = NodeFinder(cluster, instances)
    ports: dict[str, Any] = {"dispatcher": wakes_to_nowhere(), "metrics": world.metrics, "events": events}
    return {
        Step.ACQUIRE_SLOT: AcquireSlot(
            finder=finder, cluster=cluster, slots=slots, policy=policy(), records=world.records, **ports
        ),
        Step.CORDON: Cordon(
            finder=finder, cluster=cluster, slots=slots, policy=policy(), clock=world.clock, **ports
        ),
        Step.EVICT: Evict(
            cluster=cluster, slots=slots, instances=instances, policy=policy(), time_left=no_end, **ports
        ),
        Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics, world.records),
        Step.CLEANUP: Cleanup(
            cluster=cluster, slots=slots, autoscaling=world.autoscaling, instances=instances, **ports
        ),
    }


def drain_until_done(
    world: World, server: KubeServer, steps: dict[Step, StepHandler], record: LifecycleRecord
) -> tuple[LifecycleRecord, list[str]]:
    """The lifecycle, each message handled when it is due (the cluster settled before it), until it is done: the
    record then, and the web pods left on the node when the action was completed. A message the engine fails
    (raises) is what the queue would redeliver, then dead-letter: it fails the test."""
    world.records.create(record)
    engine = world.engine(dict(steps))
    left_at_completion: list[str] = []
    for _ in range(MAX_MESSAGES):
        if record.step is Step.DONE:
            return record, left_at_completion
        world.clock.current = max(world.clock.current, record.due_at)
        server.settle()
        if record.step is Step.COMPLETE:
            left_at_completion = web_pods_on(server, str(record.node))
        engine.handle(world.message(record.id))
        record = stored(world, record.id)
    raise AssertionError(f"the lifecycle did not end in {MAX_MESSAGES} messages: at {record.step}")


def stored(world: World, record_id: str) -> LifecycleRecord:
    found = world.records.get(record_id)
    assert found is not None
    return found


def web_pods_on(server: KubeServer, node: str) -> list[str]:
    pods = server.objects("pods", "shop")
    return [pod["metadata"]["name"] for pod in pods if pod["spec"].get("nodeName") == node]


def test_ec2_refusing_the_drain_its_instance_still_drains_its_node_and_completes_after_the_drain(
    ec2_endpoint: str,
) -> None:
    # Given an instance (on moto) whose node, under its EC2 DNS name, runs web pods, another node beside it, and
    # EC2 refusing the drain function every DescribeInstances from now on
    launched = ec2(ec2_endpoint, OPERATOR_KEY).run_instances(ImageId="ami-12345678", MinCount=1, MaxCount=1)
    instance = launched["Instances"][0]
    instance_id, ip = instance["InstanceId"], instance["PrivateIpAddress"]
    seed = {
        "namespaces": ["shop"],
        "nodes": [
            {"privateIp": ip, "instanceId": instance_id, "zone": "eu-west-1a"},
            {"privateIp": "10.0.2.10", "instanceId": "i-0a1b2c3d4e5f60201", "zone": "eu-west-1b"},
        ],
        "deployments": [{"name": "web", "namespace": "shop", "replicas": 4, "shutdownSeconds": 0.2}],
    }
    FAULTS.arm_for([DENIED], seed=1, callers=[DRAIN_KEY])
    instances = Ec2Instances(ec2(ec2_endpoint, DRAIN_KEY))
    world = World()
    with drain_server(seed) as server, eks_describing(server):
        node = instance["PrivateDnsName"]
        assert web_pods_on(server, node), "the test needs web pods on the instance's node"
        access = EksCluster("sandbox")
        cluster = KubeCluster(access.api_client)
        steps = drain_steps(world, cluster, instances, KubeEvents(access.api_client, owner="nodecycle"))
        record = terminating(Step.ACQUIRE_SLOT, instance_id=instance_id, id=f"{instance_id}/terminate/token")

        # When its messages come, each when it is due, until the lifecycle is done
        record, left = drain_until_done(world, server, steps, record)
        stored = server.get_object("nodes", node)

    # Then the node was found without its DNS name, cordoned and drained, and the action completed only once its
    # pods were gone, with CONTINUE: never failed into the dead-letter queue, never left to its global timeout
    assert FAULTS.counts().get("aws-denied", 0) >= 1, "EC2 refused the drain"
    assert (record.node, record.outcome, record.result) == (node, "drained", ActionResult.CONTINUE)
    assert [result for _, result in world.autoscaling.completed] == [ActionResult.CONTINUE]
    assert left == []
    assert stored is not None
    assert stored["spec"].get("unschedulable") is True
    assert stored["metadata"]["annotations"].get("nodecycle.io/released-for") == record.id
