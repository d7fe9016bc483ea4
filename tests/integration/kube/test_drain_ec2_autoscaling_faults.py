"""The drain's cleanup of a lifecycle whose action is gone (it expired, or was completed elsewhere) while Auto
Scaling does not tell the drain function the instance's state in its group, on the real adapters: Auto Scaling on
moto behind the sandbox's AWS fault layer, the node on the sandbox API server. The cleanup asks whether the
instance stayed in service, to uncordon its node if it did; the slot is given back only after that release.

- Refused (a service control policy or a permissions boundary denying autoscaling:DescribeAutoScalingInstances),
  it cannot tell: the node stays cordoned (no pod is sent to an instance that may be going), the slot is given
  back, and the node tells an operator to uncordon it if the instance is in service. Before, the refusal was raised
  at every try, the slot held until its holder expired, and the engine failed the message into the dead-letter
  queue after its refused tries, the annotations left for the sweeper.
- Throttled (an account whose other tools use up its request rate: ``Throttling`` past botocore's retries), the
  answer was raised into the engine's backoff (CLEANUP is no draining step: up to 3 minutes a try) for as long as
  the throttling lasted, the slot held meanwhile, up to its holder's TTL (invariant 10: a slot is held no longer
  than the drain's timeout, force grace and a margin). Now it is a release that fails: tried again at once for a
  few seconds, then the state is taken as unknown as a refused one is."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import boto3
import pytest
from botocore.config import Config
from botocore.retries.standard import ExponentialBackoff

from nodecycle.adapters.aws.autoscaling import AutoscalingActions
from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.cleanup import RELEASE_FAILING_FOR, Cleanup
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import LifecycleRecord, Step
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
# Each way Auto Scaling keeps the instance's state from the drain function, by the fault the sandbox injects
FAULT_KINDS = {
    "throttled": Fault("rate", "aws-throttle", target="autoscaling.DescribeAutoScalingInstances"),
    "refused": Fault("scp", "aws-denied", target="autoscaling.DescribeAutoScalingInstances"),
}


@pytest.fixture
def autoscaling(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[AutoscalingActions]:
    """Auto Scaling (moto) as the drain function reaches it, every DescribeAutoScalingInstances met by the fault
    of the kind the test names (``request.param``)."""
    # botocore's standard mode still retries each throttled call (3 attempts), but without its jittered sleeps
    # (up to 1 s, then 2 s, of wall time): the cleanup's time is the test's clock. They were 15 s of each
    # throttled case's 16 s.
    monkeypatch.setattr(ExponentialBackoff, "delay_amount", lambda self, context: 0.0)
    server = MotoServer()
    endpoint = server.start()
    FAULTS.arm_for([FAULT_KINDS[request.param]], seed=1, callers=[DRAIN_KEY])
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


@dataclass
class GoneAction:
    """A node drained (cordoned, marked) for a lifecycle whose action is gone, its record at CLEANUP, and the
    cleanup step on the real adapters."""

    record: LifecycleRecord
    step: Cleanup
    slots: FakeSlots
    events: FakeEvents
    metrics: FakeMetrics


@pytest.fixture(params=["action-expired", "unknown-action"])
def gone_action(
    request: pytest.FixtureRequest, cluster: KubeCluster, autoscaling: AutoscalingActions
) -> GoneAction:
    record = draining(Step.CORDON)
    claimed = cordon(cluster)(record, T0)
    record = record.model_copy(update={"step": Step.CLEANUP, "outcome": request.param, **claimed.changes})
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
    return GoneAction(record, step, slots, events, metrics)


def assert_released_cordoned(server: KubeServer, given: GoneAction) -> None:
    """The slot given back, the node still cordoned, its annotations cleared and marked released."""
    assert given.slots.released == [NODE]
    stored = server.get_object("nodes", NODE)
    assert stored is not None
    assert stored["spec"].get("unschedulable") is True
    annotations = stored["metadata"].get("annotations") or {}
    assert "nodecycle.io/owner" not in annotations
    assert annotations.get("nodecycle.io/released-for") == given.record.id


@pytest.mark.parametrize("autoscaling", ["refused"], indirect=True)
def test_a_cleanup_of_an_action_gone_whose_group_state_is_refused_keeps_the_cordon_and_gives_the_slot_back(
    server: KubeServer, gone_action: GoneAction
) -> None:
    # Given a node drained for a lifecycle whose action is gone, and Auto Scaling refusing the instance's state

    # When its cleanup runs
    outcome = gone_action.step(gone_action.record, T0)

    # Then the cleanup ends with the slot given back, the node cordoned, its annotations cleared and marked
    # released, and the node telling an operator what to look at
    assert FAULTS.counts().get("aws-denied", 0) >= 1, "Auto Scaling refused the cleanup"
    assert (outcome.then, outcome.again) == (None, False)
    assert_released_cordoned(server, gone_action)
    assert (NODE, "CordonKeptStateRefused", "Warning") in gone_action.events.written
    assert gone_action.metrics.counts["EvictionErrors"] >= 1


@pytest.mark.parametrize("autoscaling", ["throttled"], indirect=True)
def test_a_cleanup_of_an_action_gone_whose_group_state_is_throttled_gives_the_slot_back_within_seconds(
    server: KubeServer, gone_action: GoneAction
) -> None:
    # Given a node drained for a lifecycle whose action is gone, and Auto Scaling throttling the instance's state

    # When its cleanup is run as the engine runs a drain's steps (a failure retried within seconds: the engine
    # waits longer for a cleanup) for a minute
    runs, _ = run_retrying(gone_action.step, gone_action.record, T0, T0 + timedelta(minutes=1))

    # Then, tried again at once for a few seconds, the cleanup ends with the slot given back, the node cordoned
    # (whether its instance is in service cannot be told), its annotations cleared and marked released, and the
    # node telling an operator what to look at
    assert FAULTS.counts().get("aws-throttle", 0) >= 1, "Auto Scaling throttled the cleanup"
    at, last = runs[-1]
    assert isinstance(last, Outcome), last
    assert (last.then, last.again) == (None, False)
    assert at <= T0 + RELEASE_FAILING_FOR + timedelta(seconds=2)
    assert_released_cordoned(server, gone_action)
    assert [reason for _, reason, _ in gone_action.events.written].count("CordonKeptStateUnknown") == 1
    assert gone_action.metrics.counts["EvictionErrors"] == 1
