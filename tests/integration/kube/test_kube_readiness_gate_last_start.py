"""The readiness gate of a launch out of a warm pool whose first look comes late (past BACK_NO_SOONER), on the real
adapters: the node on the sandbox API server, EC2 on moto, whose LaunchTime each start of a stopped instance moves
on (aws/ec2_instances.py) and whose reads lag the drain function's (aws/ec2_consistency.py). Its Lease renewed since
the launch began, its status not posted since: a Running pool's kubelet, never stopped, or one booted out of a
Stopped pool that has not posted yet. EC2's LaunchTime tells them apart only when the answer shows the start."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import boto3
import pytest
from moto import mock_aws
from moto.core.utils import utcnow
from moto.ec2.models import ec2_backends

from nodecycle.adapters.aws.instances import Ec2Instances
from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.launch import BACK_NO_SOONER, CLOCK_SKEW, ReadinessGate
from nodecycle.domain.nodes import NodeFinder
from nodecycle_sandbox.aws.ec2_consistency import LAG
from nodecycle_sandbox.aws.group import SANDBOX_AMI, wait_for
from nodecycle_sandbox.aws.install import install
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import ACCOUNT, drain_cluster, drain_server
from tests.integration.kube.test_kube_readiness_gate import SEED, renewed, says_ready
from tests.support.fakes import FakeMetrics, LaunchingGroup
from tests.support.readiness_gates import Dns
from tests.unit.drain.test_drain_steps import NODE, FakeEvents, launching, readiness, wakes_to_nowhere

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client

REGION = "eu-west-1"
DRAIN_KEY = "AKIADRAINFUNCTIO0001"  # the drain function's access key: the one whose reads lag
OPERATOR_KEY = "AKIATESTOPERATOR0000"  # Auto Scaling's (the test's): it sees the latest state
WINDOW = 8.0  # seconds of EC2's lag


class Clock:
    """The lag's clock, held still by the test until it moves it past the window."""

    now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Ec2:
    instances: Ec2Instances  # the drain function's, its reads lagging
    instance: str  # launched into the warm pool an hour ago
    operator: EC2Client  # Auto Scaling's: it sees the latest state
    clock: Clock  # the lag's


@pytest.fixture
def ec2() -> Iterator[Ec2]:
    """EC2 (moto, in this process: the cluster's EKS answers come from the same mock, started after this one and so
    not resetting it) with an instance launched into its warm pool an hour ago, the drain function's reads lagging
    the writes made from then on."""
    install()
    with mock_aws():
        operator = boto3.client(
            "ec2", region_name=REGION, aws_access_key_id=OPERATOR_KEY, aws_secret_access_key="secret"
        )
        launched = operator.run_instances(ImageId=SANDBOX_AMI, MinCount=1, MaxCount=1)
        instance = str(launched["Instances"][0]["InstanceId"])
        ec2_backends[ACCOUNT][REGION].get_instance(instance).launch_time = utcnow() - timedelta(hours=1)
        clock = Clock()
        LAG.arm(WINDOW, [DRAIN_KEY], clock)
        try:
            drain = boto3.client(
                "ec2", region_name=REGION, aws_access_key_id=DRAIN_KEY, aws_secret_access_key="secret"
            )
            yield Ec2(Ec2Instances(drain), instance, operator, clock)
        finally:
            LAG.disarm()


@pytest.fixture
def server(ec2: Ec2) -> Iterator[KubeServer]:
    """The node of the instance, its kubelet renewing its Lease every 0.5 s."""
    seed = {"nodes": [{**SEED["nodes"][0], "instanceId": ec2.instance}]}
    with drain_server(seed, node_lease_renew_seconds=0.5) as kube:
        yield kube


@pytest.fixture
def gate(server: KubeServer, ec2: Ec2) -> Iterator[ReadinessGate]:
    """The gate on the real adapters (its node found by the seed's DNS name: moto's instance has an address of its
    own)."""
    with drain_cluster(server) as cluster:
        yield gate_on(cluster, ec2.instances)


def gate_on(cluster: KubeCluster, instances: Ec2Instances) -> ReadinessGate:
    return ReadinessGate(
        finder=NodeFinder(cluster, Dns()),
        cluster=cluster,
        instances=instances,
        autoscaling=LaunchingGroup(),
        dispatcher=wakes_to_nowhere(),
        policy=readiness(),
        metrics=FakeMetrics(),
        events=FakeEvents(),
    )


def after_the_last_status(server: KubeServer) -> datetime:
    """A launch's start past the clock allowance of the node's last status post (its Ready heartbeat, cut to the
    second): a status posted since the launch began tells the gate nothing here."""
    node = server.get_object("nodes", NODE) or {}
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    heartbeat = datetime.fromisoformat(ready["lastHeartbeatTime"].replace("Z", "+00:00"))
    return max(datetime.now(UTC), heartbeat + CLOCK_SKEW + timedelta(seconds=1))


def test_a_running_pools_launch_looked_at_late_opens_at_its_first_look(
    server: KubeServer, gate: ReadinessGate, ec2: Ec2
) -> None:
    # Given a launch out of a Running warm pool, its instance launched into the pool an hour ago and never stopped, its
    # kubelet running (the node's status posted as it registered, since that launch)
    instance = ec2.instance
    began = after_the_last_status(server)
    record = launching(
        origin="WarmPool", instance_id=instance, started_at=began, received_at=began + timedelta(seconds=1)
    )
    wait_for(lambda: renewed(server) > began, 10, "the kubelet's renewal since the launch began")

    # When the gate first looks past BACK_NO_SOONER (its launch held before the gate), the Lease renewed since the start
    outcome = gate(record, began + BACK_NO_SOONER + timedelta(seconds=5))

    # Then it opens: EC2 shows the instance running, last started an hour ago, before the node's status was posted
    # (before: taken for a kubelet booted out of a Stopped pool, the launch waited 40 s on the same boot)
    assert says_ready(server)
    assert (outcome.again, outcome.changes.get("outcome")) == (False, "node-ready")


def test_a_stopped_pools_launch_looked_at_late_waits_while_ec2_shows_the_stop_or_the_start(
    server: KubeServer, gate: ReadinessGate, ec2: Ec2
) -> None:
    # Given an instance launched into its warm pool an hour ago, stopped there for longer than EC2's lag and started
    # again for a launch, its node still Ready from before the stop, its booted kubelet renewing its Lease but not
    # posting its status yet; and the drain function's DescribeInstances lagging: it still shows the instance stopped,
    # its LaunchTime an hour old
    instances, instance, operator = ec2.instances, ec2.instance, ec2.operator
    server.set_boot_status_lag(60.0, node=NODE)
    operator.stop_instances(InstanceIds=[instance])
    server.instance_stopped(NODE)
    ec2.clock.now += WINDOW + 1
    began = after_the_last_status(server)
    operator.start_instances(InstanceIds=[instance])
    server.instance_started(NODE)
    wait_for(lambda: renewed(server) > began, 10, "the booted kubelet's renewal")
    assert instances.states([instance]) == {instance: "stopped"}, "EC2 did not lag the drain's read"
    assert instances.last_started(instance) is None

    # When the gate first looks past BACK_NO_SOONER
    record = launching(
        origin="WarmPool", instance_id=instance, started_at=began, received_at=began + timedelta(seconds=1)
    )
    first = gate(record, began + BACK_NO_SOONER + timedelta(seconds=5))

    # Then it waits (the answer shows the stop: the LaunchTime of an hour ago is not the instance's last start), and
    # so it does once EC2 shows the start (its LaunchTime now, after the node's last status)
    assert says_ready(server)
    assert first.again, "the launch completed on the Ready of the node's boot from before the stop"
    ec2.clock.now += WINDOW + 1
    started = instances.last_started(instance)
    assert started is not None
    assert started > began - timedelta(minutes=1), "EC2 showed the LaunchTime from before the stop"
    shown = gate(record, began + BACK_NO_SOONER + timedelta(seconds=10))  # (a first look again)
    assert shown.again, "the launch completed on the Ready of the node's boot from before the stop"
