"""Where an instance stands (``Autoscaling.membership``): FakeAutoscaling and AutoscalingActions on moto with
the sandbox's lifecycle emulation answer alike (the sides of tests/contracts/test_autoscaling.py).

What the engine relies on to tell a launch action that ended with its instance from one Auto Scaling never had
(``engine.instance_left``): the group that lists an instance and its state there, on its way out included; for
an instance no group lists any more, EC2's state of it and the group its ``aws:autoscaling:groupName`` tag
names; for an id neither knows, nothing."""

from __future__ import annotations

import pytest

from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.lifecycle import Membership
from nodecycle_sandbox.aws.group import wait_for
from tests.contracts.test_autoscaling import Emulation, FakeSide, Side, make_side
from tests.contracts.test_autoscaling import emulation as emulation  # (the emulation side's fixture)


@pytest.fixture(params=["fake", "emulation"])
def side(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Side:
    return make_side(request, monkeypatch)


def test_an_instance_its_group_terminates_is_listed_there_on_its_way_out(side: Side) -> None:
    # Given an instance the group terminates, terminate hooks holding it (and one in service beside it)
    held = side.hold()
    if isinstance(side, FakeSide):
        side.fake.states[held.action.instance_id] = "Terminating:Wait"
        side.fake.states[held.other_instance] = "InService"
        side.fake.group_of[held.other_instance] = side.group

    # Then the group lists each, where it is: no need to ask EC2
    assert side.port.membership(held.action.instance_id) == Membership(side.group, "Terminating:Wait")
    assert side.port.membership(held.other_instance) == Membership(side.group, "InService")


def test_an_instance_no_group_lists_any_more_is_told_by_ec2_with_its_groups_tag(side: Side) -> None:
    # Given an instance the group terminated: its terminate actions completed, the instance terminated
    held = side.hold()
    instance = held.action.instance_id
    assert side.port.complete(held.action, ActionResult.CONTINUE)
    assert side.port.complete(held.other_hook, ActionResult.CONTINUE)
    if isinstance(side, FakeSide):
        side.fake.in_ec2[instance] = ("terminated", side.group)
    elif isinstance(side, Emulation):
        wait_for(lambda: instance not in side.asg.instances(), 10, "the instance out of its group")

    # Then no group lists it, and EC2 says it is terminated, tagged with its group's name
    where = side.port.membership(instance)
    assert (where.lifecycle_state, where.ec2_state, where.group) == (None, "terminated", side.group)


def test_an_instance_neither_knows_is_nowhere(side: Side) -> None:
    assert side.port.membership("i-0123456789abcdef0") == Membership(None, None, None)
