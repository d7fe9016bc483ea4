"""The state change's FORGET_NODE (an instance stopped or terminated outside the hooks) while EC2 throttles the drain
function's reads (RequestLimitExceeded: an account's DescribeInstances shared with other tools), on the real
adapters: EC2 on moto behind the sandbox's AWS fault layer, the node on the sandbox API server. The step asks EC2
first whether the instance is still down (a late message must not free what a newer lifecycle of an instance up
again holds). Throttled, the failure was raised into the engine's backoff (FORGET_NODE is no draining step: doubling
up to 3 minutes a try), the slot, which others wait for, held all the while and for minutes after EC2 answered
again. Now it asks again within the drain's cadence (a poll, backing off with jitter up to the waiters' retry), frees
the slot as soon as EC2 answers, and at the drain timeout ends freeing nothing, as when EC2 refuses it
(test_drain_ec2_forget.py): what it would have freed is left to the drain's own cleanup and the sweeper."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import timedelta

import boto3
import pytest
from botocore.config import Config
from botocore.retries.standard import ExponentialBackoff

from nodecycle.adapters.aws.instances import Ec2Instances
from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.forget import ForgetNode
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import LifecycleRecord, Step, Transition
from nodecycle.domain.nodes import NodeFinder
from nodecycle_sandbox.aws.faults import FAULTS
from nodecycle_sandbox.aws.server import MotoServer
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube import test_kube_drain_steps as drain_steps
from tests.integration.kube.cluster import run_retrying
from tests.integration.kube.test_kube_drain_steps import INSTANCE, NODE, draining
from tests.support.fakes import T0
from tests.unit.drain.test_drain_steps import FakeSlots, cordon, policy, spot, wakes_to_nowhere

SEED = drain_steps.SEED
REGION = "eu-west-1"
DRAIN_KEY = "AKIADRAINFUNCTIO0001"  # the drain function's access key: the one the faults are armed for
POLL = timedelta(seconds=policy().poll_seconds)
RETRY = timedelta(seconds=policy().budget_retry_seconds)


@pytest.fixture
def instances(monkeypatch: pytest.MonkeyPatch) -> Iterator[Ec2Instances]:
    """EC2 (moto) as the drain function reaches it, throttling it every DescribeInstances."""
    # botocore still retries each throttled call, but without its jittered sleep of wall time (the step's time is
    # the test's clock): they were most of this file's 40 s
    monkeypatch.setattr(ExponentialBackoff, "delay_amount", lambda self, context: 0.0)
    server = MotoServer()
    endpoint = server.start()
    FAULTS.arm_for(
        [Fault("limit", "aws-throttle", target="ec2.DescribeInstances")], seed=1, callers=[DRAIN_KEY]
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


def stopped() -> LifecycleRecord:
    return spot(
        Step.FORGET_NODE,
        transition=Transition.STATE_CHANGE,
        id=f"{INSTANCE}/state-change",
        instance_id=INSTANCE,
    )


def forget(cluster: KubeCluster, instances: Ec2Instances, slots: FakeSlots) -> ForgetNode:
    return ForgetNode(
        finder=NodeFinder(cluster, instances),
        cluster=cluster,
        slots=slots,
        dispatcher=wakes_to_nowhere(),
        instances=instances,
        policy=policy(),
    )


def claimed(cluster: KubeCluster) -> FakeSlots:
    """The instance's node claimed by its drain, which holds its slot."""
    drained = draining(Step.CORDON)
    cordon(cluster)(drained, T0)
    return FakeSlots(holders={NODE}, held_for={NODE: drained.id})


def test_a_stop_whose_instance_state_ec2_throttles_asks_again_within_the_cadence_and_ends_at_the_timeout(
    cluster: KubeCluster, server: KubeServer, instances: Ec2Instances
) -> None:
    # Given the instance's node claimed by its drain, holding its slot, and EC2 throttling every DescribeInstances
    slots = claimed(cluster)
    server.settle()  # (the node lifecycle controller's unschedulable taint of the cordoned node, a write of its own)
    before = server.get_object("nodes", NODE)
    assert before is not None

    # When the state change of the instance comes to free what nodecycle held for it, run as the engine runs it
    # until well past the drain timeout
    runs, record = run_retrying(forget(cluster, instances, slots), stopped(), T0, T0 + 3 * policy().timeout)

    # Then it is never raised: it asks again within the drain's cadence, backing off, and at the drain timeout
    # counted from its first try it ends, freeing nothing (whether the instance is up again cannot be told)
    assert FAULTS.counts().get("aws-throttle", 0) >= 1, "EC2 throttled the step"
    assert all(isinstance(outcome, Outcome) for _, outcome in runs), runs
    delays = [(later - at).total_seconds() for (at, _), (later, _) in itertools.pairwise(runs)]
    assert all(delay <= RETRY.total_seconds() for delay in delays), delays
    assert all(delay >= POLL.total_seconds() for delay in delays[:-1]), delays
    assert len(runs) < policy().timeout / POLL / 3, delays
    at, last = runs[-1]
    assert isinstance(last, Outcome)
    assert (last.then, last.again) == (None, False)
    assert record.outcome == "instance-state-unknown"
    assert T0 + policy().timeout <= at <= T0 + policy().timeout + POLL
    assert slots.forgotten == []
    after = server.get_object("nodes", NODE)
    assert after is not None
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_a_stop_whose_instance_state_ec2_throttled_a_while_frees_the_slot_once_ec2_answers(
    cluster: KubeCluster, server: KubeServer, instances: Ec2Instances
) -> None:
    # Given the instance's node claimed by its drain, holding its slot, and EC2 throttling every DescribeInstances
    slots = claimed(cluster)
    step = forget(cluster, instances, slots)

    # When the state change is run while EC2 throttles, then once more, at the delay asked, after it answers again
    record = stopped()
    throttled = step(record, T0)
    record = record.model_copy(update=dict(throttled.changes))
    FAULTS.disarm()
    answered = step(record, T0 + timedelta(seconds=throttled.delay))

    # Then it waited a poll, not the engine's backoff, and frees the slot at its next try (EC2 lists the instance
    # no more: it is gone)
    assert (throttled.again, throttled.delay) == (True, POLL.total_seconds())
    assert (answered.then, answered.again) == (None, False)
    assert answered.changes["outcome"] == "instance-gone-without-hook"
    assert slots.forgotten == [INSTANCE]
