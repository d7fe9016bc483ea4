"""A warm pool whose group's hooks notify the intake queue, their notifications without Origin and Destination (AWS's
message example for SQS and SNS has neither field: "Configure a notification target for lifecycle notifications",
Amazon EC2 Auto Scaling user guide), nothing sent to EventBridge: intake takes the move from the instance's
lifecycle state (Warmed:Pending:Wait for a launch into the pool), and the launch is completed at once, as when the
event says it."""

from __future__ import annotations

import pytest

from nodecycle.domain.model import Transition
from nodecycle_sandbox.aws.control import SANDBOX_ACCOUNT
from nodecycle_sandbox.aws.group import default_hooks
from nodecycle_sandbox.aws.records import LAUNCHING
from tests.integration.lifecycle.harness import find_record, running
from tests.integration.lifecycle.test_warm_pool import POOL_OF_ONE, latest_action, wait_in_pool

pytestmark = pytest.mark.slow


def test_a_launch_into_the_pool_told_by_the_queue_without_origin_is_completed_at_once() -> None:
    with running(size=2, workloads=None) as sandbox:
        # Given the group's hooks notifying the intake queue, without Origin and Destination
        queue = sandbox.runner.queue("IntakeQueue").arn
        sandbox.aws.configure(eventbridge_for_sqs_hooks=False, notifications_tell_origin=False)
        for hook in default_hooks(heartbeat_timeout=300):
            sandbox.client("autoscaling").put_lifecycle_hook(
                AutoScalingGroupName=sandbox.asg.name,
                LifecycleHookName=hook.name,
                LifecycleTransition=hook.transition,
                HeartbeatTimeout=hook.heartbeat_timeout,
                DefaultResult=hook.default_result,
                NotificationTargetARN=queue,
                RoleARN=f"arn:aws:iam::{SANDBOX_ACCOUNT}:role/nodecycle-HookNotificationRole",
            )

        # When the group gets a warm pool of one: its instance is launched into the pool
        sandbox.asg.put_warm_pool(POOL_OF_ONE)

        # Then nodecycle completes that launch (from EC2 into the pool) at once, and Auto Scaling stops the
        # instance in the pool (refused as a launch into the group, it waited out its hook's timeout, then ABANDON)
        instance = wait_in_pool(sandbox)
        action = latest_action(sandbox, instance, LAUNCHING)
        assert action is not None
        assert (action.outcome, action.result) == ("completed", "CONTINUE")
        record = find_record(sandbox, instance, Transition.LAUNCHING)
        assert record is not None
        assert (record.origin, record.destination) == ("EC2", "WarmPool")
        assert record.outcome != "node-ready"  # (no readiness gate: it never runs as a node of the cluster)
