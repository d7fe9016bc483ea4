"""The eviction's polls under EC2's lag (aws/ec2_consistency.py: a lagging caller's DescribeInstances does not list an
instance launched within the window), on the real adapters: EC2 on moto lagging the drain function's reads, the node
and its pods on the sandbox API server. A poll asks EC2 whether the instance is down only to end a drain sooner (a
slot freed by the stop of its instance, a node object gone with its instance). EC2 lists a terminated instance for
about an hour, so one it does not list while its lifecycle drains it is one it does not show yet (launched moments
ago: an instance terminated as soon as its node registers), not one gone: taken for gone, the drain was skipped,
its action completed with its pods still running and its slot given back."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from moto import mock_aws

from nodecycle.adapters.aws.instances import Ec2Instances
from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.evict import Evict
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle_sandbox.aws.ec2_consistency import LAG
from nodecycle_sandbox.aws.group import SANDBOX_AMI
from nodecycle_sandbox.aws.install import install
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import drain_server
from tests.integration.kube.test_kube_drain_steps import NODE, on_its_way_out, web_pods
from tests.integration.kube.test_kube_drain_steps import SEED as DRAIN_STEPS_SEED
from tests.support.fakes import FakeMetrics
from tests.unit.drain.builders import no_end
from tests.unit.drain.test_drain_steps import FakeEvents, FakeSlots, policy, terminating, wakes_to_nowhere

REGION = "eu-west-1"
DRAIN_KEY = "AKIADRAINFUNCTIO0001"  # the drain function's access key: the one whose reads lag
OPERATOR_KEY = "AKIATESTOPERATOR0000"  # the test's (Auto Scaling's launch): it sees the latest state
WINDOW = 8.0  # seconds: the lag of 842d5b2's lifecycle test


class Clock:
    """The lag's clock, held still by the test: the instance stays within the window."""

    now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def ec2() -> Iterator[tuple[Ec2Instances, str]]:
    """EC2 (moto, in this process: the cluster's EKS answers come from the same mock, started after this one and so
    not resetting it) lagging the drain function's reads, and an instance launched within the window."""
    install()
    with mock_aws():
        LAG.arm(WINDOW, [DRAIN_KEY], Clock())
        try:
            operator = boto3.client(
                "ec2", region_name=REGION, aws_access_key_id=OPERATOR_KEY, aws_secret_access_key="secret"
            )
            launched = operator.run_instances(ImageId=SANDBOX_AMI, MinCount=1, MaxCount=1)
            drain = boto3.client(
                "ec2", region_name=REGION, aws_access_key_id=DRAIN_KEY, aws_secret_access_key="secret"
            )
            yield Ec2Instances(drain), str(launched["Instances"][0]["InstanceId"])
        finally:
            LAG.disarm()


@pytest.fixture
def server(ec2: tuple[Ec2Instances, str]) -> Iterator[KubeServer]:
    """The drain steps' cluster, its node the launched instance's."""
    _, instance = ec2
    nodes = [{**DRAIN_STEPS_SEED["nodes"][0], "instanceId": instance}, *DRAIN_STEPS_SEED["nodes"][1:]]  # type: ignore[index]
    with drain_server({**DRAIN_STEPS_SEED, "nodes": nodes}, pod_gc_quarantine_seconds=600.0) as kube:
        yield kube


def evict(cluster: KubeCluster, instances: Ec2Instances, slots: FakeSlots) -> Evict:
    return Evict(
        cluster=cluster,
        slots=slots,
        dispatcher=wakes_to_nowhere(),
        instances=instances,
        policy=policy(),
        metrics=FakeMetrics(),
        events=FakeEvents(),
        time_left=no_end,
    )


def in_progress(cluster: KubeCluster, instance: str, uid: str | None, **changes: object) -> LifecycleRecord:
    start = datetime.now(UTC)
    return terminating(
        Step.EVICT,
        id=f"{instance}/terminate/token",
        instance_id=instance,
        node=NODE,
        node_uid=uid,
        drain_started_at=start,
        drain_deadline=start + timedelta(seconds=600),
        **changes,
    )


def test_the_lag_hides_the_instance_from_the_drain(ec2: tuple[Ec2Instances, str]) -> None:
    # (the premise of the tests below: the drain's DescribeInstances does not list the instance)
    instances, instance = ec2
    assert instances.states([instance]) == {}


def test_a_drain_whose_slot_came_back_evicts_its_pods_though_ec2_does_not_list_its_instance_yet(
    cluster: KubeCluster, server: KubeServer, ec2: tuple[Ec2Instances, str]
) -> None:
    # Given a drain whose slot was removed meanwhile (expired), with room to take it back, and EC2 not listing
    # its instance to the drain yet
    instances, instance = ec2
    node = cluster.get_node(NODE)
    assert node is not None
    assert node.instance_id == instance
    record = in_progress(cluster, instance, node.uid)
    pods = web_pods(cluster)

    # When it polls
    outcome = evict(cluster, instances, FakeSlots())(record, record.drain_started_at or datetime.now(UTC))

    # Then it takes its slot back and asks the pods to leave, as for an instance that runs
    assert LAG.lagged, "EC2 lagged the drain's read"
    assert outcome.changes.get("outcome") is None
    assert outcome.again
    assert all(on_its_way_out(server, pod) for pod in pods)


def test_a_drain_whose_node_object_is_deleted_evicts_the_pods_bound_to_it_though_ec2_does_not_list_its_instance(
    cluster: KubeCluster, server: KubeServer, ec2: tuple[Ec2Instances, str]
) -> None:
    # Given a drain in progress whose node object is deleted under its running pods (they stay bound to its name
    # until podgc's quarantine is over), and EC2 not listing its instance to the drain yet
    instances, instance = ec2
    node = cluster.get_node(NODE)
    assert node is not None
    record = in_progress(cluster, instance, node.uid, extra={"polls": 1})
    pods = web_pods(cluster)
    server.remove_node(NODE)

    # When it polls
    slots = FakeSlots(holders={NODE}, held_for={NODE: record.id}, held_instance={NODE: instance})
    outcome = evict(cluster, instances, slots)(record, record.drain_started_at or datetime.now(UTC))

    # Then it asks them to leave and waits for them, its slot kept, as for an instance that runs
    assert LAG.lagged, "EC2 lagged the drain's read"
    assert (outcome.then, outcome.again) == (None, True)
    assert all(on_its_way_out(server, pod) for pod in pods)
    assert slots.released == []
