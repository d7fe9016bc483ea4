"""A Spot interruption that hibernates its instance (a persistent Spot request's, ``instance-action: hibernate``),
on the real adapters: EC2 gives no two minutes then. "If you specify hibernation as the interruption behavior, you
receive an interruption notice, but you do not receive a two-minute warning because the hibernation process begins
immediately" (EC2 User Guide, spot-instance-termination-notices). The drain meets a node whose kubelet is gone,
whose pods the node controller marks NotReady (so that a PodDisruptionBudget counts them unhealthy and refuses the
evictions), and an instance EC2 shows stopped."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import boto3
import pytest
from moto import mock_aws

from nodecycle.adapters.aws.instances import Ec2Instances
from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.common import SPOT_MARGIN
from nodecycle.domain.drain.evict import Evict
from nodecycle.domain.model import Step
from nodecycle_sandbox.aws.group import SANDBOX_AMI, wait_for
from nodecycle_sandbox.aws.install import install
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import drain_server, run
from tests.integration.kube.test_kube_drain_steps import NODE
from tests.integration.kube.test_kube_drain_steps import SEED as DRAIN_STEPS_SEED
from tests.integration.kube.test_kube_spot_stop_restart import warned_at_its_cordon
from tests.support.fakes import FakeMetrics
from tests.unit.drain.builders import no_end
from tests.unit.drain.test_drain_steps import FakeEvents, FakeSlots, cordon, policy, wakes_to_nowhere

REGION = "eu-west-1"


@pytest.fixture
def ec2() -> Iterator[tuple[Ec2Instances, str]]:
    """EC2 (moto, in this process) and one running instance of no group (a persistent Spot request's)."""
    install()
    with mock_aws():
        client = boto3.client("ec2", region_name=REGION)
        launched = client.run_instances(ImageId=SANDBOX_AMI, MinCount=1, MaxCount=1)
        yield Ec2Instances(client), str(launched["Instances"][0]["InstanceId"])


@pytest.fixture
def server(ec2: tuple[Ec2Instances, str]) -> Iterator[KubeServer]:
    """The drain steps' cluster, its node the launched instance's, its web pods under a PodDisruptionBudget that
    lets one go at a time; a node NotReady half a second after its kubelet is lost (40 s on EKS)."""
    _, instance = ec2
    nodes = [{**DRAIN_STEPS_SEED["nodes"][0], "instanceId": instance}, *DRAIN_STEPS_SEED["nodes"][1:]]  # type: ignore[index]
    web = {"name": "web", "namespace": "shop", "replicas": 4, "pdb": {"maxUnavailable": 1}}
    seed = {**DRAIN_STEPS_SEED, "nodes": nodes, "deployments": [web]}
    with drain_server(seed, node_monitor_grace_seconds=0.5) as kube:
        yield kube


def test_the_drain_of_a_hibernating_spot_instance_ends_at_once_rather_than_at_its_timeout(
    cluster: KubeCluster, server: KubeServer, ec2: tuple[Ec2Instances, str]
) -> None:
    instances, instance = ec2
    now = datetime.now(UTC).replace(microsecond=0)
    # Given a Spot interruption whose warning said EC2 hibernates the instance, its node cordoned for the drain
    # (its deadlines as the warning is timed: two minutes, which hibernation does not give)
    record = warned_at_its_cordon(instance, now, "hibernate")
    strikes = record.global_deadline
    claimed = cordon(cluster)(record, now)
    assert (claimed.then, claimed.again) == (None, False), claimed  # (on to the eviction)
    record = record.model_copy(update={"step": Step.EVICT, **claimed.changes})
    assert record.drain_deadline == strikes - SPOT_MARGIN
    # ...and EC2 hibernating it already, as it does at once: stopped to EC2, its kubelet gone, its node NotReady
    boto3.client("ec2", region_name=REGION).stop_instances(InstanceIds=[instance], Hibernate=True)
    server.instance_stopped(NODE)
    wait_for(lambda: not _ready(cluster), 10, "the node NotReady")
    metrics, events = FakeMetrics(), FakeEvents()
    step = Evict(
        cluster=cluster,
        slots=FakeSlots(holders={NODE}, held_for={NODE: record.id}),
        dispatcher=wakes_to_nowhere(),
        instances=instances,  # (moto's EC2 through the real adapter)
        policy=policy(),
        metrics=metrics,
        events=events,
        time_left=no_end,
    )

    # When the drain polls its node, as its queue brings it back, until the interruption's time
    runs, record = run(step, record, now, strikes)

    # Then it ends at its first poll, the instance being down: nothing is drained from a hibernated instance, and
    # its forced slot is not held, nor its timeout reached and paged (DrainTimeouts), for the two minutes EC2 gave
    # not
    (at, last), *_ = runs[-1:]
    assert (last.then, last.changes.get("outcome")) == (Step.CLEANUP, "instance-down"), runs
    assert at == now, runs
    assert metrics.counts.get("DrainTimeouts", 0) == 0


def _ready(cluster: KubeCluster) -> bool:
    found = cluster.get_node(NODE)
    assert found is not None
    return found.ready
