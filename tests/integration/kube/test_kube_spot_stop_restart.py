"""A Spot interruption that stops its instance (a persistent Spot request's, ``instance-action: stop``), on the real
adapters: the node on the sandbox API server (its kubelet gone with the stop, the cloud provider's shutdown taint,
the kubelet back at the start), the instance on moto's EC2, stopped and started again as EC2 does once Spot capacity
comes back. The node object stays through the stop, and nothing but the lifecycle that cordoned it lifts its cordon:
left as the drain left it, the instance ran again for good with a node that took no pods."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from moto import mock_aws

from nodecycle.adapters.aws.instances import Ec2Instances
from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.cleanup import Cleanup
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import SPOT_ACTION, LifecycleRecord, Step, Transition
from nodecycle_sandbox.aws.group import SANDBOX_AMI, wait_for
from nodecycle_sandbox.aws.install import install
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import drain_server
from tests.integration.kube.test_kube_drain_steps import NODE
from tests.integration.kube.test_kube_drain_steps import SEED as DRAIN_STEPS_SEED
from tests.support.fakes import FakeAutoscaling, FakeMetrics
from tests.unit.drain.test_drain_steps import FakeEvents, FakeSlots, cordon, spot, wakes_to_nowhere

REGION = "eu-west-1"


@pytest.fixture
def ec2() -> Iterator[tuple[Ec2Instances, str]]:
    """EC2 (moto, in this process: the cluster's EKS answers come from the same mock, started after this one and so
    not resetting it) and one running instance, of no group (a persistent Spot request's, tagged for the stack)."""
    install()
    with mock_aws():
        client = boto3.client("ec2", region_name=REGION)
        launched = client.run_instances(ImageId=SANDBOX_AMI, MinCount=1, MaxCount=1)
        yield Ec2Instances(client), str(launched["Instances"][0]["InstanceId"])


@pytest.fixture
def server(ec2: tuple[Ec2Instances, str]) -> Iterator[KubeServer]:
    """The drain steps' cluster, its node the launched instance's; a node NotReady half a second after its kubelet
    is lost (the node controller's grace, 40 s on EKS)."""
    _, instance = ec2
    nodes = [{**DRAIN_STEPS_SEED["nodes"][0], "instanceId": instance}, *DRAIN_STEPS_SEED["nodes"][1:]]  # type: ignore[index]
    seed = {**DRAIN_STEPS_SEED, "nodes": nodes}
    with drain_server(seed, node_monitor_grace_seconds=0.5) as kube:
        yield kube


def looked(step: Cleanup, record: LifecycleRecord, at: datetime) -> tuple[Outcome, LifecycleRecord]:
    """The cleanup's one run at ``at``, and the record it leaves."""
    outcome = step(record, at)
    return outcome, record.model_copy(update=dict(outcome.changes))


def ready(cluster: KubeCluster) -> bool:
    found = cluster.get_node(NODE)
    assert found is not None
    return found.ready


def warned_at_its_cordon(instance: str, now: datetime, action: str) -> LifecycleRecord:
    """The lifecycle of a Spot interruption of ``instance`` at its cordon, warned at ``now`` that EC2 ``action``s
    (stops, hibernates) the instance, the warning's two minutes ahead as its deadlines."""
    strikes = now + timedelta(minutes=2)
    return spot(
        Step.CORDON,
        id=f"{instance}/{Transition.SPOT_INTERRUPTION.short}",
        instance_id=instance,
        node=NODE,
        zone="eu-west-1a",
        group="",
        started_at=now,
        received_at=now,
        heartbeat_deadline=strikes,
        global_deadline=strikes,
        extra={SPOT_ACTION: action},
    )


def unschedulable(server: KubeServer) -> bool:
    stored = server.get_object("nodes", NODE)
    assert stored is not None
    return bool(stored["spec"].get("unschedulable"))


def test_a_node_drained_for_a_spot_stop_takes_pods_again_once_ec2_has_started_its_instance_again(
    cluster: KubeCluster, server: KubeServer, ec2: tuple[Ec2Instances, str]
) -> None:
    instances, instance = ec2
    now = datetime.now(UTC).replace(microsecond=0)
    # Given a Spot interruption whose warning said EC2 stops the instance, its node cordoned by its drain and emptied
    record = warned_at_its_cordon(instance, now, "stop")
    strikes = record.global_deadline
    claimed = cordon(cluster)(record, now)
    assert claimed.then is None, claimed
    assert unschedulable(server)
    record = record.model_copy(
        update={"step": Step.CLEANUP, "outcome": "drained", "drain_started_at": now, **claimed.changes}
    )
    events = FakeEvents()
    step = Cleanup(
        cluster=cluster,
        slots=FakeSlots(holders={NODE}, held_for={NODE: record.id}),
        dispatcher=wakes_to_nowhere(),
        autoscaling=FakeAutoscaling(),
        metrics=FakeMetrics(),
        events=events,
        instances=instances,  # (moto's EC2 through the real adapter)
    )

    # When its cleanup runs, before the interruption strikes
    released, record = looked(step, record, strikes - timedelta(seconds=8))
    assert unschedulable(server)

    # ...EC2 stops the instance (its kubelet goes, its node turns NotReady and is tainted shutdown)
    boto3.client("ec2", region_name=REGION).stop_instances(InstanceIds=[instance])
    server.instance_stopped(NODE)
    wait_for(lambda: not ready(cluster), 10, "the node NotReady")
    if released.again:
        _, record = looked(step, record, strikes + timedelta(minutes=1))
    assert unschedulable(server), "cordoned while its instance is stopped"

    # ...and starts it again hours later, once Spot capacity is back: its kubelet posts Ready
    boto3.client("ec2", region_name=REGION).start_instances(InstanceIds=[instance])
    server.instance_started(NODE)
    wait_for(lambda: ready(cluster), 10, "the node Ready again")
    at = strikes + timedelta(hours=3)
    for _ in range(5):  # (the watch's looks, as its queue brings them)
        if not released.again:
            break
        released, record = looked(step, record, at)
        at += timedelta(seconds=max(released.delay, 1))

    # Then the node is uncordoned: the capacity EC2 gave back takes pods again
    assert not unschedulable(server), "the node is still cordoned after its instance runs again"
    assert (NODE, "UncordonedAfterSpotInterruption", "Normal") in events.written
