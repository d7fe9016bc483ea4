"""The launch readiness gate while AWS refuses the drain function's EC2 reads (an SCP or a permissions boundary
denying ec2:DescribeInstances): the instance's DNS name and state on moto behind the sandbox's AWS fault layer,
the node on the sandbox API server, the lifecycle run by the step engine on the test's clock. The gate looks for
the node without the DNS name (by its instance id's name, and by provider id at its scans): a node that joins
opens it; one that never does is settled at the readiness timeout with the failure policy's result. Its message is
never failed into the dead-letter queue after the engine's refused tries (about five minutes), which left the
launch to the sweeper's keep-alive and its global timeout (up to 48 hours)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest
from botocore.config import Config

from nodecycle.adapters.aws.instances import Ec2Instances
from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.adapters.kube.eks_access import EksCluster
from nodecycle.adapters.kube.events import KubeEvents
from nodecycle.domain.completion import CompleteAction
from nodecycle.domain.launch import SCAN_AFTER, ReadinessGate
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.nodes import NodeFinder
from nodecycle.domain.policy import ActionResult
from nodecycle_sandbox.aws.faults import FAULTS
from nodecycle_sandbox.aws.server import MotoServer
from nodecycle_sandbox.faults import Fault
from tests.integration.kube.cluster import drain_server, eks_describing
from tests.support.fakes import T0, LaunchingGroup
from tests.unit.drain.test_drain_steps import launching, readiness, wakes_to_nowhere
from tests.unit.foundation.test_engine import World

REGION = "eu-west-1"
DRAIN_KEY = "AKIADRAINFUNCTIO0001"  # the drain function's access key: the one the faults are armed for
OPERATOR_KEY = "AKIASANDBOXOPERATOR0"
TIMEOUT = 600  # the readiness timeout (the default): longer than the engine's refused tries take


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


def launch_until_the_gate_ends(world: World, gate: ReadinessGate, record: LifecycleRecord) -> LifecycleRecord:
    """The launch's lifecycle, each message handled when it is due, until its gate ends: the record then. A
    message the engine fails (raises) is what the queue would redeliver, then dead-letter: it fails the test."""
    world.records.create(record)
    engine = world.engine(
        {Step.READY_GATE: gate, Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics)}
    )
    record = world.record()
    while record.step is Step.READY_GATE:
        world.clock.current = max(world.clock.current, record.due_at)
        engine.handle(world.message(record.id))
        record = world.record()
    return record


def test_ec2_refusing_the_gate_its_instance_settles_the_launch_at_the_readiness_timeout_not_dead_lettered(
    ec2_endpoint: str,
) -> None:
    # Given a launched instance (on moto), its node not registered yet, and EC2 refusing the drain function every
    # DescribeInstances (its DNS name, its state) from now on
    operator = ec2(ec2_endpoint, OPERATOR_KEY)
    instance = operator.run_instances(ImageId="ami-12345678", MinCount=1, MaxCount=1)["Instances"][0][
        "InstanceId"
    ]
    FAULTS.arm_for([Fault("scp", "aws-denied", target="ec2.DescribeInstances")], seed=1, callers=[DRAIN_KEY])
    instances = Ec2Instances(ec2(ec2_endpoint, DRAIN_KEY))
    world = World()
    with drain_server({"nodes": []}, node_lease_renew_seconds=0.5) as server, eks_describing(server):
        access = EksCluster("sandbox")
        cluster = KubeCluster(access.api_client)
        gate = ReadinessGate(
            finder=NodeFinder(cluster, instances),
            cluster=cluster,
            instances=instances,
            autoscaling=LaunchingGroup(),
            dispatcher=wakes_to_nowhere(),
            policy=readiness(readiness_timeout_seconds=str(TIMEOUT), drain_poll_seconds="10"),
            metrics=world.metrics,
            events=KubeEvents(access.api_client, owner="nodecycle"),
        )
        record = launching(instance_id=instance, id=f"{instance}/launch/token")

        # When its messages come, each when it is due, until the gate ends
        record = launch_until_the_gate_ends(world, gate, record)

    # Then the gate looked again at its poll's pace and settled the launch at its timeout with the failure
    # policy's result (its alarm: ReadinessTimeouts), rather than its message failing
    assert (record.result, record.outcome) == (ActionResult.ABANDON, "node-never-joined")
    assert record.completed_at is not None
    assert T0 + timedelta(seconds=TIMEOUT) <= record.completed_at <= T0 + timedelta(seconds=TIMEOUT + 10)
    assert [result for _, result in world.autoscaling.completed] == [ActionResult.ABANDON]
    assert world.metrics.counts["ReadinessTimeouts"] == 1


def test_ec2_refusing_the_gate_its_instance_still_finds_its_ready_node_by_provider_id_and_completes_the_launch(
    ec2_endpoint: str,
) -> None:
    # Given a launched instance (on moto) whose node registered under its DNS name and is Ready, and EC2 refusing
    # the drain function every DescribeInstances (its DNS name, its state)
    operator = ec2(ec2_endpoint, OPERATOR_KEY)
    launched = operator.run_instances(ImageId="ami-12345678", MinCount=1, MaxCount=1)["Instances"][0]
    instance, dns = launched["InstanceId"], launched["PrivateDnsName"]
    FAULTS.arm_for([Fault("scp", "aws-denied", target="ec2.DescribeInstances")], seed=1, callers=[DRAIN_KEY])
    instances = Ec2Instances(ec2(ec2_endpoint, DRAIN_KEY))
    world = World()
    with drain_server({"nodes": []}, node_lease_renew_seconds=0.5) as server, eks_describing(server):
        server.add_node(dns, instance_id=instance, zone="eu-west-1a")
        access = EksCluster("sandbox")
        cluster = KubeCluster(access.api_client)
        gate = ReadinessGate(
            finder=NodeFinder(cluster, instances),
            cluster=cluster,
            instances=instances,
            autoscaling=LaunchingGroup(),
            dispatcher=wakes_to_nowhere(),
            policy=readiness(readiness_timeout_seconds=str(TIMEOUT), drain_poll_seconds="10"),
            metrics=world.metrics,
            events=KubeEvents(access.api_client, owner="nodecycle"),
        )
        record = launching(instance_id=instance, id=f"{instance}/launch/token")

        # When its messages come, each when it is due, until the gate ends
        record = launch_until_the_gate_ends(world, gate, record)

    # Then a scan of the nodes found it by its provider id, and the launch completed with CONTINUE long before the
    # readiness timeout: the denial costs the DNS name's single GET, not the launch
    assert (record.result, record.outcome, record.node) == (ActionResult.CONTINUE, "node-ready", dns)
    assert record.completed_at is not None
    assert record.completed_at < T0 + SCAN_AFTER + timedelta(seconds=60)
    assert [result for _, result in world.autoscaling.completed] == [ActionResult.CONTINUE]
    assert world.metrics.counts.get("ReadinessTimeouts", 0) == 0
