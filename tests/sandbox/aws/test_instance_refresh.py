"""Instance refresh: old instances replaced in batches sized by the minimum healthy percentage."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from botocore.exceptions import ClientError

from nodecycle_sandbox.aws import TERMINATING
from nodecycle_sandbox.aws.group import HookSpec

from .conftest import Emulation


class CompletingDrain:
    """An EventBridge target that completes each terminate action 0.3 s after it starts, as a drain would."""

    def __init__(self, aws: Emulation) -> None:
        self._aws = aws
        self._timers: list[threading.Timer] = []

    def publish(self, event: dict[str, Any]) -> None:
        if event["source"] != "aws.autoscaling":
            return  # EC2's state changes of the instances it terminates: nothing to complete
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
