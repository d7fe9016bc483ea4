"""An instance refresh's root volume replacement as AutoscalingActions meets it, on moto with the sandbox's lifecycle
emulation: the group's terminating hooks hold the instance in ``ReplacingRootVolume:Wait`` (not
``Terminating:Wait``), their action's event saying Origin and Destination "AutoScalingGroup" ("Use lifecycle hooks
with replace root volume" and "Instance refresh replace root volume lifecycle events", Amazon EC2 Auto Scaling user
guide). Its action is confirmed as the action that holds its instance there, listed among the instances hooks hold,
and an adopted one completed; named as a termination, the same token confirms nothing."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from moto import mock_aws

from nodecycle.adapters.aws.autoscaling import AutoscalingActions
from nodecycle.domain.model import GROUP, ActionRef, Transition, adopted_token
from nodecycle.domain.policy import ActionResult
from nodecycle_sandbox.aws import AwsControl, install
from nodecycle_sandbox.aws.group import AutoScalingGroup, GroupSpec, HookSpec
from nodecycle_sandbox.aws.records import TERMINATING
from tests.contracts.conftest import REGION, aws
from tests.sandbox.aws.conftest import FakeNodes, RecordingBus

HOOK = "drain"


@pytest.fixture(scope="module")
def control() -> Iterator[AwsControl]:
    install()
    with mock_aws():
        control = AwsControl(region=REGION)
        control.connect(events=RecordingBus(), nodes=FakeNodes())
        yield control
        control.close()


@pytest.fixture
def replacing(control: AwsControl) -> tuple[AutoscalingActions, ActionRef]:
    """The adapter, and the action of the terminate hook holding an instance whose root volume is being replaced."""
    name = f"workers-{uuid.uuid4().hex[:8]}"
    group = AutoScalingGroup(
        autoscaling=aws("autoscaling"), ec2=aws("ec2"), control=control, region=REGION, name=name
    )
    group.create(GroupSpec(name=name, size=1, hooks=(HookSpec(HOOK, TERMINATING, 300, "CONTINUE"),)))
    group.wait_in_service(1, timeout=10)
    (instance_id,) = group.instances()
    found = control.emulator.find_state(instance_id)
    assert found is not None
    control.emulator.replace_root_volume(*found)
    assert group.in_state("ReplacingRootVolume:Wait") == [instance_id]
    (token,) = [
        a.token for a in group.actions() if a.instance_id == instance_id and a.transition == TERMINATING
    ]
    action = ActionRef(
        group=name,
        hook=HOOK,
        instance_id=instance_id,
        token=token,
        transition=Transition.TERMINATING,
        origin=GROUP,
        destination=GROUP,
    )
    return AutoscalingActions(aws("autoscaling")), action


def test_the_terminate_hooks_action_of_a_root_volume_replacement_is_confirmed(
    replacing: tuple[AutoscalingActions, ActionRef],
) -> None:
    port, action = replacing
    assert port.confirm(action) is True


def test_the_same_token_named_as_a_termination_confirms_nothing(
    replacing: tuple[AutoscalingActions, ActionRef],
) -> None:
    # (the instance is not terminating: an action that would terminate it holds it nowhere)
    port, action = replacing
    assert port.confirm(action.model_copy(update={"destination": "EC2"})) is False


def test_an_instance_whose_root_volume_is_replaced_is_listed_as_held_by_the_terminate_hooks(
    replacing: tuple[AutoscalingActions, ActionRef],
) -> None:
    port, action = replacing
    listed = {
        (w.instance_id, w.transition, w.origin, w.destination)
        for w in port.waiting_instances((action.group,), None)
    }
    assert listed == {(action.instance_id, Transition.TERMINATING, GROUP, GROUP)}


def test_an_adopted_root_volume_replacement_is_completed_by_its_instance(
    replacing: tuple[AutoscalingActions, ActionRef],
) -> None:
    port, action = replacing
    adopted = action.model_copy(update={"token": adopted_token(HOOK)})
    assert port.complete(adopted, ActionResult.CONTINUE) is True
