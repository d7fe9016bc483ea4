"""Which instances are alive, as the sweeper asks EC2 about its budget entries' instances: AliveInstances
(tests/unit/sweeper/test_sweeper.py), the drain steps' NoDns (tests/unit/drain/test_drain_steps.py: it called
every instance asked about alive, whatever it knew of them) and Ec2Instances.alive on moto answer alike.

What the sweeper relies on: an answer about the instances asked about only, in one batch; a stopped instance
is alive (it may start again, its node kept), a terminated one is not, and one EC2 does not know (a typo, or
forgotten an hour after its termination) is not, without failing the others' answer."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator

import pytest
from moto import mock_aws

from nodecycle.adapters.aws.instances import Ec2Instances
from tests.contracts.conftest import aws
from tests.unit.drain.test_drain_steps import NoDns
from tests.unit.sweeper.test_sweeper import AliveInstances

UNKNOWN = "i-0000000000000dead"


@pytest.fixture(params=["fake", "drain-fake", "ec2"])
def world(
    request: pytest.FixtureRequest,
) -> Iterator[tuple[Callable[[Collection[str]], set[str]], dict[str, str]]]:
    """The ``alive`` port, and instances by the state they are in."""
    if request.param == "fake":
        states = {
            "running": "i-00000000000000001",
            "stopped": "i-00000000000000002",
            "terminated": "i-00000000000000003",
            "other": "i-00000000000000004",
        }
        yield AliveInstances({states["running"], states["stopped"], states["other"]}), states
        return
    if request.param == "drain-fake":
        states = {
            "running": "i-00000000000000001",
            "stopped": "i-00000000000000002",
            "terminated": "i-00000000000000003",
            "other": "i-00000000000000004",
        }
        yield (
            NoDns(
                known={id_: state for state, id_ in states.items() if state != "other"}
                | {states["other"]: "running"}
            ).alive,
            states,
        )
        return
    with mock_aws():
        ec2 = aws("ec2")
        ids = [
            i["InstanceId"]
            for i in ec2.run_instances(ImageId="ami-12c6146b", MinCount=4, MaxCount=4)["Instances"]
        ]
        states = dict(zip(("running", "stopped", "terminated", "other"), ids, strict=True))
        ec2.stop_instances(InstanceIds=[states["stopped"]])
        ec2.terminate_instances(InstanceIds=[states["terminated"]])
        yield Ec2Instances(ec2).alive, states


def test_of_the_instances_asked_about_the_running_and_stopped_ones_are_alive(
    world: tuple[Callable[[Collection[str]], set[str]], dict[str, str]],
) -> None:
    alive, states = world
    asked = [states["running"], states["stopped"], states["terminated"], UNKNOWN]

    assert alive(asked) == {states["running"], states["stopped"]}  # never "other", not asked about
    assert alive([]) == set()
    assert alive([UNKNOWN]) == set()
