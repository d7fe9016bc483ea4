"""The launch readiness gate at its timeout, when Auto Scaling is terminating the instance (a scale-in before it was in
service, an operator) while a terminate hook holds it running in EC2: Auto Scaling ended the launch action with the
termination, and no heartbeat of the launch was due to find out (a launch hook of a long heartbeat timeout). Each way
the gate times out (no node, a node not Ready, the API server refusing or not answering) ends the launch as
``instance-gone``: no ReadinessTimeouts counted (its alarm pages for nodes that do not come up), no completion with
the failure policy's result. An instance still held by its launch, or Auto Scaling not answering, times out as
before."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest

from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.cluster import NodeInfo
from tests.support.fakes import T0, FakeMetrics, LaunchingGroup
from tests.support.readiness_gates import Dns, RefusingCluster, gate_on
from tests.unit.drain.test_drain_steps import INSTANCE, FakeCluster, launching, node, readiness

POLL = 5
TIMEOUT = 60


@dataclass
class FailingCluster(FakeCluster):
    """An API server that answers none of the gate's reads (500s, throttling past the client's retries)."""

    def find_node(
        self, instance_id: str, private_dns_name: str | None, *, scan: bool = True
    ) -> NodeInfo | None:
        raise TransientError("the server is currently unable to handle the request")


class Unanswering(LaunchingGroup):
    """Auto Scaling throttling DescribeAutoScalingInstances past the client's retries."""

    def lifecycle_state(self, instance_id: str) -> str | None:
        self.asked += 1
        raise TransientError("Rate exceeded")


CLUSTERS = {
    "node-never-joined": lambda: FakeCluster(),
    "node-not-ready": lambda: FakeCluster(nodes={node().name: node(ready=False)}),
    "readiness-refused": lambda: RefusingCluster(),
    "readiness-unknown": lambda: FailingCluster(),
}


def timed_out(cluster: FakeCluster, autoscaling: LaunchingGroup, metrics: FakeMetrics) -> tuple[object, ...]:
    """The gate's looks (every POLL s, a gate of TIMEOUT s) of a confirmed launch until one ends the gate: where it
    went, with which result and outcome."""
    gate = gate_on(
        cluster,
        Dns(),
        readiness(readiness_timeout_seconds=str(TIMEOUT), drain_poll_seconds=str(POLL)),
        metrics=metrics,
        autoscaling=autoscaling,
    )
    record: LifecycleRecord = launching(verified_at=T0)
    now = T0
    for _ in range(TIMEOUT // POLL + 2):
        outcome = gate(record, now)
        if not outcome.again:
            return outcome.then, outcome.changes.get("result"), outcome.changes.get("outcome")
        record = record.model_copy(update=dict(outcome.changes))
        now += timedelta(seconds=POLL)
    raise AssertionError("the gate never ended")


@pytest.mark.parametrize("why", CLUSTERS)
def test_a_gate_timing_out_on_an_instance_its_group_terminates_ends_the_launch_as_gone(why: str) -> None:
    # Given a launch whose gate times out (``why``) while its group terminates the instance, held running in EC2 by
    # a terminate hook
    autoscaling = LaunchingGroup(states={INSTANCE: "Terminating:Wait"})
    metrics = FakeMetrics()

    # When the gate reaches its timeout
    ended = timed_out(CLUSTERS[why](), autoscaling, metrics)

    # Then the launch ends past its completion as one whose instance is gone, with no readiness timeout counted,
    # Auto Scaling asked once (at the timeout, not at every look)
    assert ended == (Step.DONE, None, "instance-gone")
    assert metrics.counts.get("ReadinessTimeouts", 0) == 0
    assert autoscaling.asked == 1


@pytest.mark.parametrize("why", CLUSTERS)
@pytest.mark.parametrize(
    "autoscaling", [LaunchingGroup, Unanswering], ids=["held-by-its-launch", "unanswered"]
)
def test_a_gate_timing_out_on_an_instance_its_launch_still_holds_completes_with_the_failure_policy(
    why: str, autoscaling: type[LaunchingGroup]
) -> None:
    # Given a launch whose gate times out (``why``), its instance still in Pending:Wait (or Auto Scaling not saying)
    metrics = FakeMetrics()

    # When the gate reaches its timeout
    ended = timed_out(CLUSTERS[why](), autoscaling(), metrics)

    # Then it is the readiness timeout it was: completed with the failure policy's result, and counted
    assert ended == (Step.COMPLETE, ActionResult.ABANDON, why)
    assert metrics.counts["ReadinessTimeouts"] == 1
