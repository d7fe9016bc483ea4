"""The drain's cleanup of a lifecycle whose action is gone (it expired, or was completed elsewhere) while Auto
Scaling throttles the drain function's DescribeAutoScalingInstances (an account whose other tools use up its
request rate: ``Throttling`` past botocore's retries), on the real adapters: Auto Scaling on moto behind the
sandbox's AWS fault layer, the node on the sandbox API server. The cleanup asks whether the instance stayed in
service, to uncordon its node if it did; the slot is given back only after that release. A throttled answer was
raised into the engine's backoff (CLEANUP is no draining step: up to 3 minutes a try) for as long as the throttling
lasted, the slot held meanwhile, up to its holder's TTL (invariant 10: a slot is held no longer than the drain's
timeout, force grace and a margin). Now it is a release that fails: tried again at once for a few seconds, then the
state is taken as unknown as a refused one is (see test_drain_ec2_autoscaling_refusals.py): the node stays
cordoned, told, and the slot is given back."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import boto3
import pytest
from botocore.config import Config

from nodecycle.adapters.aws.autoscaling import AutoscalingActions
from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.cleanup import RELEASE_FAILING_FOR, Cleanup
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import Step
from nodecycle_sandbox.aws.faults import FAULTS
from nodecycle_sandbox.aws.server import MotoServer
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube import test_kube_drain_steps as drain_steps
from tests.integration.kube.cluster import run_retrying
from tests.integration.kube.test_kube_drain_steps import NODE, draining
from tests.support.fakes import T0, FakeMetrics
from tests.unit.drain.test_drain_steps import Ec2Maintenance, FakeEvents, FakeSlots, cordon, wakes_to_nowhere

SEED = drain_steps.SEED
REGION = "eu-west-1"
DRAIN_KEY = "AKIADRAINFUNCTIO0001"  # the drain function's access key: the one the faults are armed for


@pytest.fixture
def autoscaling() -> Iterator[AutoscalingActions]:
    """Auto Scaling (moto) as the drain function reaches it, throttling every DescribeAutoScalingInstances."""
    server = MotoServer()
    endpoint = server.start()
    FAULTS.arm_for(
        [Fault("rate", "aws-throttle", target="autoscaling.DescribeAutoScalingInstances")],
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
def test_a_cleanup_of_an_action_gone_whose_group_state_is_throttled_gives_the_slot_back_within_seconds(
    cluster: KubeCluster, server: KubeServer, autoscaling: AutoscalingActions, gone: str
) -> None:
    # Given a node drained for a lifecycle whose action is gone, and Auto Scaling throttling the instance's state
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

    # When its cleanup is run as the engine runs a drain's steps (a failure retried within seconds: the engine
    # waits longer for a cleanup) for a minute
    runs, _ = run_retrying(step, record, T0, T0 + timedelta(minutes=1))

    # Then, tried again at once for a few seconds, the cleanup ends with the slot given back, the node cordoned
    # (whether its instance is in service cannot be told), its annotations cleared and marked released, and the
    # node telling an operator what to look at
    assert FAULTS.counts().get("aws-throttle", 0) >= 1, "Auto Scaling throttled the cleanup"
    at, last = runs[-1]
    assert isinstance(last, Outcome), last
    assert (last.then, last.again) == (None, False)
    assert at <= T0 + RELEASE_FAILING_FOR + timedelta(seconds=2)
    assert slots.released == [NODE]
    stored = server.get_object("nodes", NODE)
    assert stored is not None
    assert stored["spec"].get("unschedulable") is True
    annotations = stored["metadata"].get("annotations") or {}
    assert "nodecycle.io/owner" not in annotations
    assert annotations.get("nodecycle.io/released-for") == record.id
    assert [reason for _, reason, _ in events.written].count("CordonKeptStateUnknown") == 1
    assert metrics.counts["EvictionErrors"] == 1
