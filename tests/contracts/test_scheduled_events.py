"""The instances' scheduled maintenance, as a maintenance's drain asks EC2 before its first ask for a slot and at each
look before it is due: the drain steps' Ec2Maintenance (tests/unit/drain/test_drain_steps.py) and
Ec2Instances.scheduled_events on moto answer alike.

What the drain relies on: an instance EC2 does not know (forgotten about an hour after its termination: a scale-in,
a refresh, before the maintenance it was told of) has no scheduled maintenance, as a terminated one EC2 still lists
has none; the answer is an empty list, not a failure (DescribeInstanceStatus naming the instance answers
InvalidInstanceID.NotFound: a ClientError the engine does not retry, which failed the lifecycle's message into the
dead-letter queue at every redelivery and sweep)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from moto import mock_aws

from nodecycle.adapters.aws.instances import Ec2Instances
from nodecycle.domain.ports.instances import ScheduledEvent
from tests.contracts.conftest import aws
from tests.unit.drain.test_drain_steps import Ec2Maintenance

UNKNOWN = "i-0000000000000dead"


@pytest.fixture(params=["fake", "ec2"])
def world(
    request: pytest.FixtureRequest,
) -> Iterator[tuple[Callable[[str], list[ScheduledEvent]], dict[str, str]]]:
    """The ``scheduled_events`` port, and instances by the state they are in (none with a scheduled event)."""
    if request.param == "fake":
        states = {"running": "i-00000000000000001", "terminated": "i-00000000000000002"}
        yield Ec2Maintenance(known={states["running"]: "running"}).scheduled_events, states
        return
    with mock_aws():
        ec2 = aws("ec2")
        ids = [
            i["InstanceId"]
            for i in ec2.run_instances(ImageId="ami-12c6146b", MinCount=2, MaxCount=2)["Instances"]
        ]
        states = dict(zip(("running", "terminated"), ids, strict=True))
        ec2.terminate_instances(InstanceIds=[states["terminated"]])
        yield Ec2Instances(ec2).scheduled_events, states


def test_an_instance_ec2_does_not_know_has_no_scheduled_maintenance(
    world: tuple[Callable[[str], list[ScheduledEvent]], dict[str, str]],
) -> None:
    scheduled_events, states = world
    assert scheduled_events(UNKNOWN) == []
    assert scheduled_events(states["terminated"]) == []
    assert scheduled_events(states["running"]) == []
