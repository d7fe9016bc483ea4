"""The drain's cleanup of a lifecycle whose action is gone (it expired, or was completed elsewhere) while AWS
refuses the drain function the instance's state in its group (a service control policy or a permissions boundary
denying autoscaling:DescribeAutoScalingInstances), on the real adapters: Auto Scaling on moto behind the sandbox's
AWS fault layer, the node on the sandbox API server. The cleanup asks whether the instance stayed in service, to
uncordon its node if it did. Refused, it cannot tell: the node stays cordoned (no pod is sent to an instance that
may be going), the slot is given back, and the node tells an operator to uncordon it if the instance is in
service. Before, the refusal was raised at every try, the slot held until its holder expired, and the engine
failed the message into the dead-letter queue after its refused tries, the annotations left for the sweeper."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from botocore.config import Config

from nodecycle.adapters.aws.autoscaling import AutoscalingActions
from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.cleanup import Cleanup
from nodecycle.domain.model import Step
from nodecycle_sandbox.aws.faults import FAULTS
from nodecycle_sandbox.aws.server import MotoServer
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube import test_kube_drain_steps as drain_steps
from tests.integration.kube.test_kube_drain_steps import NODE, draining
from tests.support.fakes import T0, FakeMetrics
from tests.unit.drain.test_drain_steps import Ec2Maintenance, FakeEvents, FakeSlots, cordon, wakes_to_nowhere

SEED = drain_steps.SEED
REGION = "eu-west-1"
DRAIN_KEY = "AKIADRAINFUNCTIO0001"  # the drain function's access key: the one the faults are armed for


@pytest.fixture
def autoscaling() -> Iterator[AutoscalingActions]:
    """Auto Scaling (moto) as the drain function reaches it, refusing it every DescribeAutoScalingInstances."""
    server = MotoServer()
    endpoint = server.start()
    FAULTS.arm_for(
        [Fault("scp", "aws-denied", target="autoscaling.DescribeAutoScalingInstances")],
        seed=1,
        callers=[DRAIN_KEY],
    )
    client = boto3.client(
        "autoscaling",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=DRAIN_KEY,
        aws_secret_access_key="secret",
        config=Config(retries={"mode": "standard"}),
    )
    yield AutoscalingActions(client)
    FAULTS.disarm()
    server.stop()


@pytest.mark.parametrize("gone", ["action-expired", "unknown-action"])
def test_a_cleanup_of_an_action_gone_whose_group_state_is_refused_keeps_the_cordon_and_gives_the_slot_back(
    cluster: KubeCluster, server: KubeServer, autoscaling: AutoscalingActions, gone: str
) -> None:
    # Given a node drained for a lifecycle whose action is gone, and Auto Scaling refusing the instance's state
    record = draining(Step.CORDON)
    claimed = cordon(cluster)(record, T0)
    record = record.model_copy(update={"step": Step.CLEANUP, "outcome": gone, **claimed.changes})
    slots, events, metrics = (
        FakeSlots(holders={NODE}, held_for={NODE: record.id}),
        FakeEvents(),
        FakeMetrics(),
    )
    step = Cleanup(
        cluster=cluster,
        slots=slots,
        dispatcher=wakes_to_nowhere(),
        autoscaling=autoscaling,
        metrics=metrics,
        events=events,
        instances=Ec2Maintenance(),
    )

    # When its cleanup runs
    outcome = step(record, T0)

    # Then the cleanup ends with the slot given back, the node cordoned, its annotations cleared and marked
    # released, and the node telling an operator what to look at
    assert FAULTS.counts().get("aws-denied", 0) >= 1, "Auto Scaling refused the cleanup"
    assert (outcome.then, outcome.again) == (None, False)
    assert slots.released == [NODE]
    stored = server.get_object("nodes", NODE)
    assert stored is not None
    assert stored["spec"].get("unschedulable") is True
    annotations = stored["metadata"].get("annotations") or {}
    assert "nodecycle.io/owner" not in annotations
    assert annotations.get("nodecycle.io/released-for") == record.id
    assert (NODE, "CordonKeptStateRefused", "Warning") in events.written
    assert metrics.counts["EvictionErrors"] >= 1
