"""The slot's ask while EC2 throttles the drain function's DescribeInstances (RequestLimitExceeded: an account whose
other tools use up its EC2 request rate, a refresh of hundreds of instances), on the real adapters: EC2 on moto
behind the sandbox's AWS fault layer, the node on the sandbox API server. The instance's DNS name only spares a
scan of the nodes: unanswered, the node is found by its instance id's name and its provider id, as when EC2 refuses
the call, and the drain takes its place in line now. Before, the throttled lookup was raised into the step engine's
backoff (up to three minutes between tries, for as long as the throttling lasted): the node out of line, a free
slot idle while it waited, and later nodes served first."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from botocore.config import Config

from nodecycle.adapters.aws.instances import Ec2Instances
from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.acquire import AcquireSlot
from nodecycle.domain.model import Step
from nodecycle.domain.nodes import PRIVATE_DNS, NodeFinder
from nodecycle_sandbox.aws.faults import FAULTS
from nodecycle_sandbox.aws.server import MotoServer
from nodecycle_sandbox.faults import Fault
from tests.integration.kube import test_kube_drain_steps as drain_steps
from tests.integration.kube.test_kube_drain_steps import INSTANCE, NODE
from tests.support.fakes import T0, FakeMetrics, InMemoryRecords
from tests.unit.drain.test_drain_steps import FakeEvents, FakeSlots, policy, terminating, wakes_to_nowhere

SEED = drain_steps.SEED
REGION = "eu-west-1"
DRAIN_KEY = "AKIADRAINFUNCTIO0001"  # the drain function's access key: the one the faults are armed for


@pytest.fixture
def throttled() -> Iterator[Ec2Instances]:
    """EC2 (moto) as the drain function reaches it, throttling it every DescribeInstances (botocore's own retries
    throttled too)."""
    server = MotoServer()
    endpoint = server.start()
    FAULTS.arm_for(
        [Fault("rate", "aws-throttle", target="ec2.DescribeInstances")], seed=1, callers=[DRAIN_KEY]
    )
    client = boto3.client(
        "ec2",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=DRAIN_KEY,
        aws_secret_access_key="secret",
        config=Config(retries={"mode": "standard", "max_attempts": 2}),
    )
    yield Ec2Instances(client)
    FAULTS.disarm()
    server.stop()


def test_a_slots_ask_whose_dns_lookup_ec2_throttles_finds_the_node_and_takes_the_slot(
    cluster: KubeCluster, throttled: Ec2Instances
) -> None:
    # Given a terminating instance whose node is in the cluster, a free slot, and EC2 throttling the drain function
    # every DescribeInstances
    record = terminating(Step.ACQUIRE_SLOT, id=f"{INSTANCE}/terminate/token", instance_id=INSTANCE)
    slots = FakeSlots()
    step = AcquireSlot(
        finder=NodeFinder(cluster, throttled),
        cluster=cluster,
        slots=slots,
        dispatcher=wakes_to_nowhere(),
        policy=policy(),
        metrics=FakeMetrics(),
        events=FakeEvents(),
        records=InMemoryRecords(),
    )

    # When its first step asks for a slot
    outcome = step(record, T0)

    # Then the node is found without the DNS name (by provider id) and the slot taken; the name is asked again later
    assert FAULTS.counts().get("aws-throttle", 0) >= 1, "EC2 throttled the lookup"
    assert (outcome.then, outcome.again) == (None, False)
    assert outcome.changes["node"] == NODE
    assert slots.held_for == {NODE: record.id}
    assert PRIVATE_DNS not in outcome.changes["extra"]
