"""The unit tests' Auto Scaling (tests/support/fakes.py FakeAutoscaling) as the adapter now confirms an action
(bd43e6f): an instance that waits where a terminate action holds it, but in another group than the one named with
the token, is not confirmed, and is not heartbeated for it. The fake heartbeats first and looks at the state only:
unit tests of a path that confirms through it cannot see a confirmation of another group's action."""

from __future__ import annotations

from nodecycle.domain.model import ActionRef, Transition
from tests.support.fakes import FakeAutoscaling


def test_the_fake_confirms_no_action_of_an_instance_of_another_group() -> None:
    fake = FakeAutoscaling()
    action = ActionRef(
        group="nodes",
        hook="terminate",
        instance_id="i-0123456789abcdef0",
        token="token",
        transition=Transition.TERMINATING,
    )
    fake.states[action.instance_id] = "Terminating:Wait"
    fake.group_of[action.instance_id] = "workers-b"  # another stack's group

    assert not fake.confirm(action)
    assert fake.heartbeats == []


def test_the_fake_confirms_the_action_of_an_instance_of_the_group_named() -> None:
    fake = FakeAutoscaling()
    action = ActionRef(
        group="nodes",
        hook="terminate",
        instance_id="i-0123456789abcdef0",
        token="token",
        transition=Transition.TERMINATING,
    )
    fake.states[action.instance_id] = "Terminating:Wait"
    fake.group_of[action.instance_id] = "nodes"

    assert fake.confirm(action)
    assert fake.heartbeats == [action]
