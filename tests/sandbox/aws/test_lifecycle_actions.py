"""Lifecycle actions: instances wait for their hooks, heartbeats, timeouts and AWS's answers."""

from __future__ import annotations

import time

import pytest
from botocore.exceptions import ClientError

from nodecycle_sandbox.aws import LAUNCHING, TERMINATING, ec2_instances, lifecycle
from nodecycle_sandbox.aws.group import HookSpec, wait_for

from .conftest import OPERATOR_KEY, Emulation

TERMINATE_HOOK = HookSpec("drain", TERMINATING, heartbeat_timeout=60, default_result="CONTINUE")


def _complete(aws: Emulation, hook: str, token: str, result: str = "CONTINUE") -> None:
    aws.autoscaling.complete_lifecycle_action(
        AutoScalingGroupName="workers",
        LifecycleHookName=hook,
        LifecycleActionToken=token,
        LifecycleActionResult=result,
    )


def test_a_terminate_hook_holds_the_instance_until_its_action_is_completed(aws: Emulation) -> None:
    # Given a group of two in service with a terminate hook
    group = aws.group(TERMINATE_HOOK, size=2)
    victim = sorted(group.in_state("InService"))[0]

    # When the instance is terminated
    group.terminate(victim)

    # Then it waits in Terminating:Wait, still running, while a replacement launches
    assert group.instances()[victim] == "Terminating:Wait"
    assert len(group.in_state("InService")) == 2
    state = aws.ec2.describe_instances(InstanceIds=[victim])["Reservations"][0]["Instances"][0]["State"][
        "Name"
    ]
    assert state == "running"

    # When the action is completed
    (token,) = aws.bus.tokens(victim, TERMINATING)
    _complete(aws, "drain", token)

    # Then the instance is gone from the group and terminated in EC2
    assert victim not in group.instances()
    state = aws.ec2.describe_instances(InstanceIds=[victim])["Reservations"][0]["Instances"][0]["State"][
        "Name"
    ]
    assert state == "terminated"
    (action,) = group.actions(transition=TERMINATING)
    assert (action.outcome, action.result, action.completed_by) == ("completed", "CONTINUE", OPERATOR_KEY)


def test_a_completed_token_cannot_be_completed_again(aws: Emulation) -> None:
    # Given an action completed once
    group = aws.group(TERMINATE_HOOK, size=1)
    victim = group.in_state("InService")[0]
    group.terminate(victim)
    (token,) = aws.bus.tokens(victim, TERMINATING)
    _complete(aws, "drain", token)

    # When it is completed again
    with pytest.raises(ClientError) as raised:
        _complete(aws, "drain", token)

    # Then AWS's ValidationError comes back, and the late call is on record
    assert raised.value.response["Error"]["Code"] == "ValidationError"
    assert raised.value.response["Error"]["Message"] == f"No active Lifecycle Action found with token {token}"
    (action,) = group.actions(transition=TERMINATING)
    assert [call[2] for call in action.late_calls] == ["CompleteLifecycleAction"]


def test_an_unknown_token_or_instance_has_no_active_action(aws: Emulation) -> None:
    # Given a group without pending actions
    group = aws.group(TERMINATE_HOOK, size=1)
    instance = group.in_state("InService")[0]

    # When a made-up token, or an instance without an action, is completed or heartbeated
    with pytest.raises(ClientError) as by_token:
        _complete(aws, "drain", "6d2f1cf4-0000-4000-8000-000000000000")
    with pytest.raises(ClientError) as by_instance:
        aws.autoscaling.record_lifecycle_action_heartbeat(
            AutoScalingGroupName="workers", LifecycleHookName="drain", InstanceId=instance
        )

    # Then both get "No active Lifecycle Action found", naming what was given
    assert by_token.value.response["Error"]["Message"].endswith("token 6d2f1cf4-0000-4000-8000-000000000000")
    assert by_instance.value.response["Error"]["Message"] == (
        f"No active Lifecycle Action found with instance ID {instance}"
    )


@pytest.mark.parametrize(
    "naming",
    [
        {"InstanceId": "other-instance"},
        {"LifecycleHookName": "eip"},
        {"AutoScalingGroupName": "others"},
    ],
    ids=["another-instance", "another-hook", "another-group"],
)
def test_a_real_token_named_with_another_instance_hook_or_group_has_no_active_action(
    aws: Emulation, naming: dict[str, str]
) -> None:
    # Given an action held by the terminate hook "drain" of "workers", another hook, another group, and another
    # instance in service
    group = aws.group(TERMINATE_HOOK, HookSpec("eip", TERMINATING, 60, "CONTINUE"), size=2)
    aws.group(TERMINATE_HOOK, name="others")
    victim, other = sorted(group.in_state("InService"))
    group.terminate(victim)
    token = next(a.token for a in group.actions(transition=TERMINATING) if a.hook == "drain")
    named = {
        "AutoScalingGroupName": "workers",
        "LifecycleHookName": "drain",
        "LifecycleActionToken": token,
        "InstanceId": victim,
        **{key: other if value == "other-instance" else value for key, value in naming.items()},
    }

    # When its token is completed and heartbeated with one of the other names (a replayed message edited, or
    # forged from a leaked token)
    with pytest.raises(ClientError) as completed:
        aws.autoscaling.complete_lifecycle_action(**named, LifecycleActionResult="CONTINUE")
    with pytest.raises(ClientError) as heartbeated:
        aws.autoscaling.record_lifecycle_action_heartbeat(**named)

    # Then AWS's answer comes back for both, and the action is still active: the instance waits
    for raised in (completed, heartbeated):
        assert raised.value.response["Error"]["Code"] == "ValidationError"
        assert (
            raised.value.response["Error"]["Message"]
            == f"No active Lifecycle Action found with token {token}"
        )
    assert group.instances()[victim] == "Terminating:Wait"
    (action,) = [a for a in group.actions(transition=TERMINATING) if a.token == token]
    assert (action.active, action.heartbeats) == (True, [])


def test_an_action_can_be_completed_by_instance_id_without_a_token(aws: Emulation) -> None:
    # Given an instance held by the terminate hook
    group = aws.group(TERMINATE_HOOK, size=1)
    victim = group.in_state("InService")[0]
    group.terminate(victim, decrement=False)

    # When the action is completed naming only the instance
    aws.autoscaling.complete_lifecycle_action(
        AutoScalingGroupName="workers",
        LifecycleHookName="drain",
        InstanceId=victim,
        LifecycleActionResult="ABANDON",
    )

    # Then the instance terminates (ABANDON at terminate still terminates)
    assert victim not in group.instances()
    (action,) = group.actions(transition=TERMINATING)
    assert action.result == "ABANDON"


def test_a_heartbeat_extends_the_wait_and_a_timeout_applies_the_default_result(aws: Emulation) -> None:
    # Given a terminate hook with a three-second heartbeat timeout (1 s was outlasted between two heartbeats
    # 0.4 s apart by a whole-suite run on a loaded machine: the action timed out and the heartbeat was refused)
    group = aws.group(HookSpec("drain", TERMINATING, heartbeat_timeout=3, default_result="CONTINUE"), size=1)
    victim = group.in_state("InService")[0]
    group.terminate(victim, decrement=True)
    started = time.time()

    # When heartbeats are recorded for 4 s
    for _ in range(4):
        time.sleep(1.0)
        aws.autoscaling.record_lifecycle_action_heartbeat(
            AutoScalingGroupName="workers", LifecycleHookName="drain", InstanceId=victim
        )

    # Then the instance is still held past its first heartbeat deadline
    assert time.time() - started > 3.5
    assert group.instances()[victim] == "Terminating:Wait"

    # And once heartbeats stop, the timeout applies the default result
    wait_for(lambda: victim not in group.instances(), timeout=10)
    (action,) = group.actions(transition=TERMINATING)
    assert (action.outcome, action.result, len(action.heartbeats)) == ("heartbeat-timeout", "CONTINUE", 4)
    assert action.finished_at is not None
    assert action.finished_at - action.heartbeats[-1] == pytest.approx(3.0, abs=0.3)


class _StillClock:
    """A clock that moves only as the test moves it (``now``), from the wall clock's time at its creation."""

    def __init__(self) -> None:
        self.now = time.time()

    def time(self) -> float:
        return self.now


class _LateClock:
    """The emulation's clock, ``late`` seconds ahead of the one its timers run on: a timer that fires late,
    as on a loaded machine, without waiting for it."""

    def __init__(self) -> None:
        self.late = 0.0

    def time(self) -> float:
        return time.time() + self.late


def test_an_action_past_its_deadline_has_timed_out_though_its_timer_has_not_fired_yet(
    aws: Emulation, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an action of a 60 s heartbeat timeout, 61 s later, before the emulation's timer has said so
    clock = _LateClock()
    monkeypatch.setattr(lifecycle, "time", clock)
    group = aws.group(TERMINATE_HOOK, size=1)
    victim = group.in_state("InService")[0]
    group.terminate(victim, decrement=True)
    clock.late = 61

    # When a heartbeat and a completion name it
    with pytest.raises(ClientError) as heartbeated:
        aws.autoscaling.record_lifecycle_action_heartbeat(
            AutoScalingGroupName="workers", LifecycleHookName="drain", InstanceId=victim
        )
    with pytest.raises(ClientError) as completed:
        aws.autoscaling.complete_lifecycle_action(
            AutoScalingGroupName="workers",
            LifecycleHookName="drain",
            InstanceId=victim,
            LifecycleActionResult="CONTINUE",
        )

    # Then AWS's answer comes back to both: the action timed out at its deadline with the hook's default
    # result, and the instance is gone
    for raised in (heartbeated, completed):
        assert raised.value.response["Error"]["Message"] == (
            f"No active Lifecycle Action found with instance ID {victim}"
        )
    (action,) = group.actions(transition=TERMINATING)
    assert (action.outcome, action.result, action.heartbeats) == ("heartbeat-timeout", "CONTINUE", [])
    assert action.finished_at == action.deadline
    assert victim not in group.instances()


def test_heartbeats_never_extend_past_the_global_timeout(
    aws: Emulation, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a global timeout of 2 x the heartbeat timeout (AWS: 100 x, at most 48 h), on a clock the test moves
    # (on the wall clock, a 1 s heartbeat timeout and heartbeats 0.2 s apart: a heartbeat that came 1.1 s
    # after the one before, as on a loaded machine, found the action ended by its heartbeat timeout)
    clock = _StillClock()
    monkeypatch.setattr(lifecycle, "time", clock)
    aws.control.configure(global_timeout_factor=2)
    group = aws.group(HookSpec("drain", TERMINATING, heartbeat_timeout=60, default_result="CONTINUE"), size=1)
    hook = aws.autoscaling.describe_lifecycle_hooks(AutoScalingGroupName="workers")["LifecycleHooks"][0]
    assert hook["GlobalTimeout"] == 120
    victim = group.in_state("InService")[0]
    group.terminate(victim, decrement=True)

    # When heartbeats come within each heartbeat timeout, the last a second before the global timeout
    started = clock.now
    for after in (50, 100, 119):
        clock.now = started + after
        aws.autoscaling.record_lifecycle_action_heartbeat(
            AutoScalingGroupName="workers", LifecycleHookName="drain", InstanceId=victim
        )

    # Then the next one, within its heartbeat timeout but past the global timeout, finds the action ended
    clock.now = started + 121
    with pytest.raises(ClientError):
        aws.autoscaling.record_lifecycle_action_heartbeat(
            AutoScalingGroupName="workers", LifecycleHookName="drain", InstanceId=victim
        )
    # at the global timeout, with the default result
    (action,) = group.actions(transition=TERMINATING)
    assert (action.outcome, action.result, len(action.heartbeats)) == ("global-timeout", "CONTINUE", 3)
    assert action.finished_at is not None
    assert action.finished_at - action.started_at == pytest.approx(120.0)


def test_a_heartbeat_after_the_hook_was_lowered_extends_the_action_by_the_hooks_timeout_now(
    aws: Emulation, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an action of a 60 s heartbeat timeout, on a clock the test moves, whose hook an operator lowers to 30 s
    # 10 s after it started ("extends the timeout by the length of time defined using the PutLifecycleHook API call":
    # RecordLifecycleActionHeartbeat's reference; no action is documented to keep its hook's timeout from its start)
    clock = _StillClock()
    monkeypatch.setattr(lifecycle, "time", clock)
    group = aws.group(TERMINATE_HOOK, size=1)
    victim = group.in_state("InService")[0]
    group.terminate(victim, decrement=True)
    started = clock.now
    clock.now = started + 10
    aws.autoscaling.put_lifecycle_hook(
        AutoScalingGroupName="workers",
        LifecycleHookName="drain",
        LifecycleTransition="autoscaling:EC2_INSTANCE_TERMINATING",
        HeartbeatTimeout=30,
    )
    (action,) = group.actions(transition=TERMINATING)
    assert action.deadline == started + 60  # (the period running when it was lowered is the one it began)

    # When a heartbeat comes 20 s after the action started
    clock.now = started + 20
    aws.autoscaling.record_lifecycle_action_heartbeat(
        AutoScalingGroupName="workers", LifecycleHookName="drain", InstanceId=victim
    )

    # Then it extends the action by the hook's 30 s, not the 60 s the action started with
    (action,) = group.actions(transition=TERMINATING)
    assert action.deadline == started + 50
    clock.now = started + 51
    with pytest.raises(ClientError):
        aws.autoscaling.record_lifecycle_action_heartbeat(
            AutoScalingGroupName="workers", LifecycleHookName="drain", InstanceId=victim
        )
    (action,) = group.actions(transition=TERMINATING)
    assert (action.outcome, action.finished_at) == ("heartbeat-timeout", started + 50)


def test_a_launch_waits_in_pending_wait_and_an_abandoned_launch_is_replaced(aws: Emulation) -> None:
    # Given a launch hook
    group = aws.group(HookSpec("ready", LAUNCHING, heartbeat_timeout=60), size=1)
    (first,) = group.in_state("Pending:Wait")

    # When its action is abandoned
    (token,) = aws.bus.tokens(first, LAUNCHING)
    _complete(aws, "ready", token, "ABANDON")

    # Then the instance is terminated and a new one waits in its place
    assert first not in group.instances()
    (second,) = group.in_state("Pending:Wait")
    assert second != first

    # And CONTINUE puts the replacement in service
    (token,) = aws.bus.tokens(second, LAUNCHING)
    _complete(aws, "ready", token, "CONTINUE")
    assert group.instances() == {second: "InService"}
    asg_instances = aws.autoscaling.describe_auto_scaling_instances(InstanceIds=[second])[
        "AutoScalingInstances"
    ]
    assert asg_instances[0]["LifecycleState"] == "InService"


def test_every_hook_of_a_transition_must_let_the_instance_go(aws: Emulation) -> None:
    # Given two terminate hooks
    group = aws.group(TERMINATE_HOOK, HookSpec("eip", TERMINATING, 60, "CONTINUE"), size=1)
    victim = group.in_state("InService")[0]
    group.terminate(victim, decrement=True)
    tokens = {a.hook: a.token for a in group.actions(transition=TERMINATING)}

    # When only one completes
    _complete(aws, "drain", tokens["drain"])

    # Then the instance still waits, until the other completes too
    assert group.instances()[victim] == "Terminating:Wait"
    _complete(aws, "eip", tokens["eip"])
    assert victim not in group.instances()


def test_abandon_at_terminate_stops_the_other_hooks_actions(aws: Emulation) -> None:
    # Given two terminate hooks holding an instance
    group = aws.group(TERMINATE_HOOK, HookSpec("eip", TERMINATING, 60, "CONTINUE"), size=1)
    victim = group.in_state("InService")[0]
    group.terminate(victim, decrement=True)
    tokens = {a.hook: a.token for a in group.actions(transition=TERMINATING)}

    # When one of them is completed with ABANDON
    _complete(aws, "drain", tokens["drain"], "ABANDON")

    # Then the instance terminates at once (AWS: "abandon stops any remaining actions, such as other lifecycle
    # hooks, and continue allows any other lifecycle hooks to complete"), and the other hook's action is over
    assert victim not in group.instances()
    with pytest.raises(ClientError) as raised:
        _complete(aws, "eip", tokens["eip"])
    assert (
        raised.value.response["Error"]["Message"]
        == f"No active Lifecycle Action found with token {tokens['eip']}"
    )
    outcomes = {a.hook: a.outcome for a in group.actions(transition=TERMINATING)}
    assert outcomes == {"drain": "completed", "eip": "cancelled"}


def test_deleting_a_terminate_hook_continues_its_outstanding_actions(aws: Emulation) -> None:
    # Given an instance held by the terminate hook
    group = aws.group(TERMINATE_HOOK, size=1)
    victim = group.in_state("InService")[0]
    group.terminate(victim, decrement=True)
    (token,) = aws.bus.tokens(victim, TERMINATING)

    # When the hook is deleted
    aws.autoscaling.delete_lifecycle_hook(AutoScalingGroupName="workers", LifecycleHookName="drain")

    # Then its action is completed first, with CONTINUE (AWS), so the instance terminates, and the action's
    # token is no longer active
    assert victim not in group.instances()
    (action,) = group.actions(transition=TERMINATING)
    assert (action.outcome, action.result) == ("hook-deleted", "CONTINUE")
    with pytest.raises(ClientError) as raised:
        _complete(aws, "drain", token)
    assert raised.value.response["Error"]["Message"] == f"No active Lifecycle Action found with token {token}"


def test_deleting_a_launch_hook_abandons_its_outstanding_actions(aws: Emulation) -> None:
    # Given an instance held by the launch hook
    group = aws.group(HookSpec("ready", LAUNCHING, heartbeat_timeout=60), size=1)
    (first,) = group.in_state("Pending:Wait")

    # When the hook is deleted
    aws.autoscaling.delete_lifecycle_hook(AutoScalingGroupName="workers", LifecycleHookName="ready")

    # Then its action is completed first, with ABANDON (AWS): the instance is terminated, and its
    # replacement, with no launch hook left, goes in service
    assert first not in group.instances()
    (action,) = group.actions(transition=LAUNCHING)
    assert (action.instance_id, action.outcome, action.result) == (first, "hook-deleted", "ABANDON")
    assert list(group.instances().values()) == ["InService"]


def test_ec2_lists_a_terminated_instance_for_a_while_and_then_no_more(
    aws: Emulation, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given EC2 keeping terminated instances listed for half a second (about an hour on AWS), on a clock the
    # test moves (on the wall clock, the calls below outlasted the half second under load: an instance
    # completed 0.5 s before the first describe was no longer listed), and an instance terminated through its
    # hook
    clock = _StillClock()
    monkeypatch.setattr(ec2_instances, "time", clock)
    aws.control.configure(terminated_retention_seconds=0.5)
    group = aws.group(TERMINATE_HOOK, size=1)
    victim = group.in_state("InService")[0]
    group.terminate(victim)
    (token,) = aws.bus.tokens(victim, TERMINATING)
    _complete(aws, "drain", token)
    by_id = [{"Name": "instance-id", "Values": [victim]}]

    # Then for a while it is listed as terminated, and its status only when all instances are asked for
    (reservation,) = aws.ec2.describe_instances(Filters=by_id)["Reservations"]
    assert reservation["Instances"][0]["State"]["Name"] == "terminated"
    assert aws.ec2.describe_instance_status(InstanceIds=[victim])["InstanceStatuses"] == []
    (status,) = aws.ec2.describe_instance_status(InstanceIds=[victim], IncludeAllInstances=True)[
        "InstanceStatuses"
    ]
    assert status["InstanceState"]["Name"] == "terminated"

    # When the retention has passed, Then EC2 no longer knows it
    clock.now += 0.6
    assert aws.ec2.describe_instances(Filters=by_id)["Reservations"] == []
    for call in (aws.ec2.describe_instances, aws.ec2.describe_instance_status):
        with pytest.raises(ClientError) as raised:
            call(InstanceIds=[victim])
        assert raised.value.response["Error"]["Code"] == "InvalidInstanceID.NotFound"
