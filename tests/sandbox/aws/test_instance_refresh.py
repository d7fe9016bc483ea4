"""Instance refresh: old instances replaced in batches sized by the minimum healthy percentage; with the
ReplaceRootVolume strategy, the same instances kept, each held by the terminate hooks, then by the launch hooks."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from botocore.exceptions import ClientError

from nodecycle_sandbox.aws import LAUNCHING, TERMINATING
from nodecycle_sandbox.aws.group import HookSpec, WarmPoolSpec, wait_for
from nodecycle_sandbox.aws.lifecycle import ROOT_VOLUME_REBOOT_SECONDS

from .conftest import Emulation


class CompletingDrain:
    """An EventBridge target that completes each terminate action 0.3 s after it starts, as a drain would."""

    def __init__(self, aws: Emulation) -> None:
        self._aws = aws
        self._timers: list[threading.Timer] = []
        self.events: list[dict[str, Any]] = []  # the lifecycle actions' events, in order

    def publish(self, event: dict[str, Any]) -> None:
        if event["source"] != "aws.autoscaling":
            return  # EC2's state changes of the instances it terminates: nothing to complete
        self.events.append(event)
        detail = event["detail"]
        timer = threading.Timer(
            0.3,
            self._aws.autoscaling.complete_lifecycle_action,
            kwargs={
                "AutoScalingGroupName": detail["AutoScalingGroupName"],
                "LifecycleHookName": detail["LifecycleHookName"],
                "LifecycleActionToken": detail["LifecycleActionToken"],
                "LifecycleActionResult": "CONTINUE",
            },
        )
        self._timers.append(timer)
        timer.start()

    def join(self) -> None:
        for timer in self._timers:
            timer.join()


def test_a_refresh_replaces_every_instance_in_batches_and_keeps_a_timeline(aws: Emulation) -> None:
    # Given four instances with a terminate hook, and a drain that completes each action after 0.3 s
    group = aws.group(HookSpec("drain", TERMINATING, 60, "CONTINUE"), size=4)
    old = set(group.instances())
    drain = CompletingDrain(aws)
    aws.control.connect(events=drain, nodes=aws.nodes)

    # When a refresh runs with 50 % minimum healthy
    refresh_id = group.start_refresh(min_healthy_percentage=50)
    timeline = group.wait_refresh(refresh_id, timeout=10)

    # Then it succeeded, two instances at a time, and none of the old instances is left
    assert timeline.status == "Successful"
    assert timeline.batch_size == 2
    assert [len(b.instance_ids) for b in timeline.batches] == [2, 2]
    assert not old & set(group.instances())
    assert len(group.in_state("InService")) == 4

    # And every replaced instance has its terminate start and end on the timeline, within the refresh
    assert set(timeline.instances_to_replace) == old
    assert timeline.finished_at is not None
    for instance_id in old:
        history = timeline.instances[instance_id]
        assert history.terminate_started_at is not None
        assert history.terminated_at is not None
        assert (
            timeline.started_at
            <= history.terminate_started_at
            < history.terminated_at
            <= timeline.finished_at
        )
    status = aws.autoscaling.describe_instance_refreshes(AutoScalingGroupName="workers")["InstanceRefreshes"][
        0
    ]
    assert (status["Status"], status["PercentageComplete"]) == ("Successful", 100)
    drain.join()


def test_a_second_start_while_a_refresh_runs_is_refused_as_auto_scaling_does_and_the_harness_keeps_its_own(
    aws: Emulation,
) -> None:
    # Given a refresh running on a group whose terminate actions nobody completes
    group = aws.group(HookSpec("drain", TERMINATING, 60, "CONTINUE"), size=2)
    refresh_id = group.start_refresh(min_healthy_percentage=0)

    # When StartInstanceRefresh comes again (botocore's retry of a call whose answer was lost)
    with pytest.raises(ClientError) as refused:
        group.autoscaling.start_instance_refresh(AutoScalingGroupName=group.name)

    # Then Auto Scaling's own error code answers it, as AWS does (not a ValidationError)
    assert refused.value.response["Error"]["Code"] == "InstanceRefreshInProgress"

    # And the harness's start takes the running refresh as its own instead of failing the run
    assert group.start_refresh(min_healthy_percentage=0) == refresh_id


REPLACE_ROOT_VOLUME = "ReplaceRootVolume"


def test_a_refresh_replacing_root_volumes_keeps_its_instances_held_by_the_terminate_then_the_launch_hooks(
    aws: Emulation,
) -> None:
    # Given two instances with a terminate and a launch hook, and a target that completes each action after 0.3 s
    drain = CompletingDrain(aws)
    aws.control.connect(events=drain, nodes=aws.nodes)
    group = aws.group(
        HookSpec("drain", TERMINATING, 60, "CONTINUE"), HookSpec("gate", LAUNCHING, 60, "ABANDON"), size=2
    )
    group.wait_in_service(2, timeout=10)
    old = set(group.instances())

    # When a refresh replaces their root volumes, one at a time
    refresh_id = group.start_refresh(min_healthy_percentage=50, strategy=REPLACE_ROOT_VOLUME)
    # (each replacement takes the instance down ROOT_VOLUME_REBOOT_SECONDS, one after the other: 15 s and more)
    timeline = group.wait_refresh(refresh_id, timeout=15 + 2 * ROOT_VOLUME_REBOOT_SECONDS)

    # Then it succeeded with the same instances, each replaced once, and in service again
    assert timeline.status == "Successful"
    assert set(group.instances()) == old
    assert sorted(group.in_state("InService")) == sorted(old)
    assert all(len(timeline.instances[i].root_volume_replaced_at) == 1 for i in old)
    assert all(timeline.instances[i].terminated_at is None for i in old)

    # And each was held first under the terminate hook, then under the launch hook, as AWS's events tell
    # ("Instance refresh replace root volume lifecycle events": Origin and Destination the group, Action)
    for instance_id in old:
        told = [
            (e["detail"]["LifecycleTransition"], e["detail"]["Origin"], e["detail"]["Destination"])
            for e in drain.events
            if e["detail"]["EC2InstanceId"] == instance_id
            and e["detail"].get("Action") == REPLACE_ROOT_VOLUME
        ]
        assert told == [
            (TERMINATING, "AutoScalingGroup", "AutoScalingGroup"),
            (LAUNCHING, "AutoScalingGroup", "AutoScalingGroup"),
        ]
    status = aws.autoscaling.describe_instance_refreshes(AutoScalingGroupName="workers")["InstanceRefreshes"][
        0
    ]
    assert (status["Status"], status["PercentageComplete"]) == ("Successful", 100)
    drain.join()


def test_a_root_volume_replacement_waits_in_its_own_state_and_goes_on_even_when_its_action_is_abandoned(
    aws: Emulation,
) -> None:
    # Given an instance with a terminate hook nobody completes
    group = aws.group(HookSpec("drain", TERMINATING, 60, "CONTINUE"), size=1)
    (instance_id,) = group.instances()

    # When a refresh replaces its root volume
    refresh_id = group.start_refresh(min_healthy_percentage=0, strategy=REPLACE_ROOT_VOLUME)

    # Then the hook holds it in ReplacingRootVolume:Wait (not Terminating:Wait), nothing rebooted yet
    wait_for(lambda: group.in_state("ReplacingRootVolume:Wait") == [instance_id], 10)
    assert aws.nodes.stopped == set()
    (token,) = aws.bus.tokens(instance_id, TERMINATING)

    # And an ABANDON does not stop the replacement (AWS documents no result that would): the instance reboots on
    # its new volume and comes back into service, never terminated
    aws.autoscaling.complete_lifecycle_action(
        AutoScalingGroupName="workers",
        LifecycleHookName="drain",
        LifecycleActionToken=token,
        LifecycleActionResult="ABANDON",
    )
    timeline = group.wait_refresh(refresh_id, timeout=15)
    assert timeline.status == "Successful"
    assert group.in_state("InService") == [instance_id]
    assert len(timeline.instances[instance_id].root_volume_replaced_at) == 1


def test_a_refresh_replacing_root_volumes_is_refused_on_a_group_with_a_warm_pool(aws: Emulation) -> None:
    # Given a group of one in service with a warm pool
    group = aws.group(
        HookSpec("drain", TERMINATING, 60, "CONTINUE"),
        size=1,
        warm_pool=WarmPoolSpec(min_size=0, max_group_prepared_capacity=1),
    )
    (instance_id,) = group.instances()

    # When a refresh replacing root volumes is asked for it
    with pytest.raises(ClientError) as refused:
        group.autoscaling.start_instance_refresh(
            AutoScalingGroupName=group.name, Strategy="ReplaceRootVolume"
        )

    # Then it is refused ("You can't start an instance refresh with Replace Root Volume on an EC2 Auto Scaling
    # Group that has a warm pool"), and nothing started: no refresh, the instance in service and unheld
    assert refused.value.response["Error"]["Code"] == "ValidationError"
    assert "warm pool" in refused.value.response["Error"]["Message"]
    assert (
        aws.autoscaling.describe_instance_refreshes(AutoScalingGroupName=group.name)["InstanceRefreshes"]
        == []
    )
    assert group.in_state("InService") == [instance_id]
