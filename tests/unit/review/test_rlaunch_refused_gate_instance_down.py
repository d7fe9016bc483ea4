"""The launch readiness gate while the API server refuses it the nodes (403: the drain role's RBAC narrowed, or
not applied yet after an upgrade) and the instance goes down meanwhile (a scale-in racing the launch, a Spot
interruption): it still asks EC2 about the instance at its usual pace, and ends as the instance's going down, not at
its readiness timeout as a refusal (whose alarm then pages an operator for an instance that is simply gone, and
whose record stays open up to the whole timeout)."""

from __future__ import annotations

from datetime import datetime, timedelta

from nodecycle.domain.launch import SCAN_EVERY
from nodecycle.domain.policy import ActionResult
from tests.support.fakes import T0
from tests.support.readiness_gates import GoingDown, RefusingCluster, gate_in, gate_until_it_ends
from tests.unit.drain.test_drain_steps import readiness
from tests.unit.foundation.test_engine import World

POLL = 5


class CountingEc2(GoingDown):
    """EC2 for an instance terminated ``at``: counts the questions about its DNS name as well."""

    def __init__(self, world: World, at: datetime, state: str) -> None:
        super().__init__(world, at, state)
        self.names_asked = 0

    def private_dns_name(self, instance_id: str) -> str | None:
        self.names_asked += 1
        return super().private_dns_name(instance_id)


def test_a_gate_refused_the_nodes_ends_as_instance_down_when_its_instance_is_terminated() -> None:
    # Given a launch whose gate (10 minutes, polls every 5 s) is refused every read of nodes, and whose instance
    # is terminated 40 s in (Auto Scaling ends its launch action then)
    world = World()
    cluster = RefusingCluster()
    ec2 = CountingEc2(world, at=T0 + timedelta(seconds=40), state="terminated")
    gate = gate_in(
        world, cluster, ec2, readiness(readiness_timeout_seconds="600", drain_poll_seconds=str(POLL))
    )
    world.autoscaling.active = False

    # When its messages come, each when it is due, until the gate ends
    record, polls = gate_until_it_ends(world, gate)

    # Then it ends within a few polls of the instance going down, as down, no readiness timeout counted
    assert (record.result, record.outcome) == (ActionResult.ABANDON, "instance-down")
    assert record.completed_at is not None
    assert record.completed_at <= T0 + timedelta(seconds=40 + POLL * (SCAN_EVERY + 1))
    assert world.metrics.counts.get("ReadinessTimeouts", 0) == 0
    # And EC2 was asked the instance's state once in SCAN_EVERY polls at most, its DNS name once: a refused look
    # keeps what it learned, rather than asking EC2 again at every poll
    assert 1 <= ec2.asked <= polls // SCAN_EVERY + 1
    assert ec2.names_asked == 1
