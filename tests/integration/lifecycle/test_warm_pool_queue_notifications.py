"""A warm pool whose group's hooks notify the intake queue, their notifications without Origin and Destination (AWS's
message example for SQS and SNS has neither field: "Configure a notification target for lifecycle notifications",
Amazon EC2 Auto Scaling user guide), nothing sent to EventBridge: intake takes the move from the instance's
lifecycle state (Warmed:Pending:Wait for a launch into the pool), and the launch is completed at once, as when the
event says it."""

from __future__ import annotations

import time
from datetime import datetime

import pytest

from nodecycle.domain.model import Transition
from nodecycle.domain.nodes import CLOCK_SKEW
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.control import SANDBOX_ACCOUNT
from nodecycle_sandbox.aws.group import default_hooks
from nodecycle_sandbox.aws.records import LAUNCHING, ActionRecord
from tests.integration.lifecycle.harness import find_record, records, running, wait_for
from tests.integration.lifecycle.test_warm_pool import (
    POOL_OF_ONE,
    TAKES_BACK_HIBERNATED,
    latest_action,
    lease_renewals,
    node_object,
    scaled_in_to_pool,
    wait_in_pool,
)

pytestmark = pytest.mark.slow


def hooks_notify_the_queue(sandbox: Sandbox) -> None:
    """The group's hooks notify the intake queue, their notifications without Origin and Destination, nothing sent to
    EventBridge."""
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


def test_a_launch_into_the_pool_told_by_the_queue_without_origin_is_completed_at_once() -> None:
    with running(size=2, workloads=None) as sandbox:
        # Given the group's hooks notifying the intake queue, without Origin and Destination
        hooks_notify_the_queue(sandbox)

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


# The real kubelet's nodeStatusReportFrequency: an unchanged status is posted again only this often (the sandbox's
# kubelets report every 20 s unless told)
STATUS_REPORT_SECONDS = 300.0
READINESS_TIMEOUT_SECONDS = 90  # under that report period (ReadinessTimeoutSeconds takes 30 s and more)
HIBERNATED_FOR = 15.0  # how long the instance sleeps out of the pool: within the node monitor's grace (40 s)


def test_a_launch_out_of_a_hibernated_pool_told_by_the_queue_without_origin_completes_once_its_kubelet_runs() -> (
    None
):
    with running(
        size=3,
        warm_pool=TAKES_BACK_HIBERNATED,
        parameters={"ReadinessTimeoutSeconds": str(READINESS_TIMEOUT_SECONDS)},
        node_lease_renew=1.0,
    ) as sandbox:
        # Given kubelets that post an unchanged node status every 5 minutes, as a real one does, and an instance the
        # group scaled in to its hibernated pool, its node drained and kept cordoned
        sandbox.kube.set_status_report_seconds(STATUS_REPORT_SECONDS)
        sandbox.asg.set_desired(2)
        instance, _, node, _ = scaled_in_to_pool(sandbox, "Warmed:Hibernated")
        before = node_object(sandbox, node)["status"]["nodeInfo"]["bootID"]
        # and the group's hooks notifying the intake queue, without Origin and Destination, nothing sent to EventBridge
        hooks_notify_the_queue(sandbox)

        # When the group scales out again, the instance resuming HIBERNATED_FOR seconds after it leaves the pool: its
        # node still Ready from before (within the node monitor's grace), on the same boot, its kubelet renewing the
        # Lease again once it runs but posting the unchanged status only at its next report
        asleep_since = max(lease_renewals(sandbox, node))  # its kubelet's last renewal before the pool
        # (a node older than its launch by more than the gate's clock allowance, as any node from before a warm pool
        # is: it joined once its instance had booted, which went to the pool and slept since. The sandbox does all
        # of that within seconds of its start, where a node registered a moment before the launch would be taken
        # for the new instance's own; its Lease, renewed moments before the pool, is the stale one the gate must
        # not take)
        created = datetime.fromisoformat(
            node_object(sandbox, node)["metadata"]["creationTimestamp"]
        ).timestamp()
        wait_for(
            lambda: time.time() > created + CLOCK_SKEW.total_seconds() + 2, 15, "a node older than the launch"
        )
        sandbox.aws.plan_nodes(join_after=HIBERNATED_FOR)
        sandbox.asg.set_desired(3)

        # Then its launch is completed with CONTINUE, not abandoned at the readiness timeout (a good instance replaced)
        back = launch_over(sandbox, instance, timeout=READINESS_TIMEOUT_SECONDS + 60)
        assert (back.outcome, back.result) == ("completed", "CONTINUE")
        record = records(sandbox).get(f"{instance}/{Transition.LAUNCHING.short}/{back.token}")
        assert record is not None
        assert (record.origin, record.destination, record.outcome) == (None, None, "node-ready")
        # and not on the Ready left from before the hibernation: only after its kubelet ran again (a Lease renewed
        # since its last renewal before the pool; the instance resumes HIBERNATED_FOR seconds after it leaves the
        # pool, which a loaded machine may put before the action's own start)
        assert back.finished_at is not None
        renewals = lease_renewals(sandbox, node)
        woke = [t for t in renewals if t > asleep_since] or [float("inf")]
        assert min(woke) <= back.finished_at, (
            f"the launch ({back.started_at:.1f} to {back.finished_at:.1f}) completed before any Lease renewal since "
            f"the one before the pool ({asleep_since:.1f}); renewals: {[round(t, 1) for t in renewals[-8:]]}"
        )
        assert node_object(sandbox, node)["status"]["nodeInfo"]["bootID"] == before


def launch_over(sandbox: Sandbox, instance_id: str, timeout: float) -> ActionRecord:
    """The instance's latest launch action, once it is over (completed, or timed out)."""

    def over() -> ActionRecord | None:
        action = latest_action(sandbox, instance_id, LAUNCHING)
        return action if action is not None and action.finished_at is not None else None

    return wait_for(over, timeout, f"the launch of {instance_id} over")
