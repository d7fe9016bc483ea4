"""The eviction's polls while AWS refuses the drain function its EC2 reads (a service control policy or a
permissions boundary denying ec2:DescribeInstances), on the real adapters: EC2 on moto behind the sandbox's AWS
fault layer, the node and its pods on the sandbox API server. A poll asks EC2 whether the instance is still up
only to end a drain sooner (a slot freed by the stop of its instance, a node object gone with its instance):
unanswered, the drain goes on as for an instance that runs, its pods asked to leave and waited for within the
drain's timeout policy. Before, the poll raised the refusal at every try, and the engine failed its message into
the dead-letter queue after its refused tries, the node half drained and its slot held until it expired."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.config import Config

from nodecycle.adapters.aws.instances import Ec2Instances
from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.evict import Evict
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle_sandbox.aws.faults import FAULTS
from nodecycle_sandbox.aws.server import MotoServer
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.test_kube_drain_steps import INSTANCE, NODE, on_its_way_out, web_pods
from tests.integration.kube.test_kube_drain_steps import SEED as DRAIN_STEPS_SEED
from tests.support.fakes import FakeMetrics
from tests.unit.drain.builders import no_end
from tests.unit.drain.test_drain_steps import FakeEvents, FakeSlots, policy, terminating, wakes_to_nowhere

SEED = DRAIN_STEPS_SEED
SERVER_OPTIONS = {"pod_gc_quarantine_seconds": 600.0}  # a deleted node's pods stay bound to it for the test
REGION = "eu-west-1"
DRAIN_KEY = "AKIADRAINFUNCTIO0001"  # the drain function's access key: the one the faults are armed for


@pytest.fixture
def instances() -> Iterator[Ec2Instances]:
    """EC2 (moto) as the drain function reaches it, refusing it every DescribeInstances."""
    server = MotoServer()
    endpoint = server.start()
    FAULTS.arm_for([Fault("scp", "aws-denied", target="ec2.DescribeInstances")], seed=1, callers=[DRAIN_KEY])
    client = boto3.client(
        "ec2",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=DRAIN_KEY,
        aws_secret_access_key="secret",
        config=Config(retries={"mode": "standard"}),
    )
    yield Ec2Instances(client)
    FAULTS.disarm()
    server.stop()


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


def in_progress(cluster: KubeCluster, **changes: Any) -> LifecycleRecord:
    node = cluster.get_node(NODE)
    assert node is not None
    start = datetime.now(UTC)
    return terminating(
        Step.EVICT,
        id=f"{INSTANCE}/terminate/token",
        instance_id=INSTANCE,
        node=NODE,
        node_uid=node.uid,
        drain_started_at=start,
        drain_deadline=start + timedelta(seconds=600),
        **changes,
    )


def test_a_drain_whose_slot_came_back_evicts_its_pods_though_ec2_refuses_the_instances_state(
    cluster: KubeCluster, server: KubeServer, instances: Ec2Instances
) -> None:
    # Given a drain whose slot was removed meanwhile (expired, or freed by a state change), with room to take it
    # back, and EC2 refusing to say whether its instance still runs
    record = in_progress(cluster)
    pods = web_pods(cluster)

    # When it polls
    outcome = evict(cluster, instances, FakeSlots())(record, record.drain_started_at or datetime.now(UTC))

    # Then it takes its slot back and asks the pods to leave, as for an instance that runs
    assert FAULTS.counts().get("aws-denied", 0) >= 1, "EC2 refused the drain"
    assert outcome.changes.get("outcome") is None
    assert outcome.again
    assert all(on_its_way_out(server, pod) for pod in pods)


def test_a_drain_whose_node_object_is_deleted_evicts_the_pods_bound_to_it_though_ec2_refuses_the_instances_state(
    cluster: KubeCluster, server: KubeServer, instances: Ec2Instances
) -> None:
    # Given a drain in progress whose node object is deleted under its running pods (they stay bound to its
    # name until podgc's quarantine is over), and EC2 refusing to say whether its instance still runs
    record = in_progress(cluster, extra={"polls": 1})
    pods = web_pods(cluster)
    server.remove_node(NODE)

    # When it polls
    slots = FakeSlots(holders={NODE}, held_for={NODE: record.id})
    outcome = evict(cluster, instances, slots)(record, record.drain_started_at or datetime.now(UTC))

    # Then it asks them to leave and waits for them, as for an instance that runs
    assert FAULTS.counts().get("aws-denied", 0) >= 1, "EC2 refused the drain"
    assert (outcome.then, outcome.again) == (None, True)
    assert all(on_its_way_out(server, pod) for pod in pods)
