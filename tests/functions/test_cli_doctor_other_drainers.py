"""``nodecycle doctor`` on a group another drainer still acts on: a team replacing aws-node-termination-handler
(queue mode) with nodecycle, group by group (docs/migrating.md).

aws-node-termination-handler's queue processor acts on an instance when its group carries the tag key
``aws-node-termination-handler/managed`` (its ``checkASGTagBeforeDraining``, on by default: a DescribeTags of the
instance's group). Its EventBridge rule, as its guide writes it, sends it every terminate lifecycle action of the
account whatever the hook, and after its drain it completes the action of the hook the event names with
CONTINUE. On a group that still carries the tag, it drains nodecycle's nodes outside the budget and completes
nodecycle's own action: the budget (invariant 1) and the drain before the completion (invariant 2) broken from
outside, with every nodecycle check green. Auto Scaling (moto) answers the group's tags as AWS does."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodecycle_cli.doctor import aws_checks
from tests.functions.test_doctor_hooks import RULES, add_group


@pytest.fixture
def autoscaling() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("autoscaling", region_name="eu-west-1")
        client.create_launch_configuration(
            LaunchConfigurationName="workers", ImageId="ami-12c6146b", InstanceType="t3.micro"
        )
        yield client


def tag(autoscaling: Any, group: str, key: str, value: str = "") -> None:
    autoscaling.create_or_update_tags(
        Tags=[
            {
                "ResourceId": group,
                "ResourceType": "auto-scaling-group",
                "Key": key,
                "Value": value,
                "PropagateAtLaunch": True,
            }
        ]
    )


def test_a_group_aws_node_termination_handler_still_manages_is_a_problem_naming_the_tag_to_remove(
    autoscaling: Any,
) -> None:
    # Given a group with nodecycle's terminate hook that still carries aws-node-termination-handler's tag (the
    # key alone counts: the handler's guides tag it with an empty value or "true")
    add_group(autoscaling, "workers")
    tag(autoscaling, "workers", aws_checks.NTH_MANAGED_TAG)

    # When the doctor checks the group's hooks
    findings = [f for f in aws_checks.hooks(autoscaling, ["workers"], RULES) if f.status != "ok"]

    # Then one problem names the tag, the other handler, and the command that removes the tag from the group
    assert [f.status for f in findings] == ["problem"]
    (found,) = findings
    assert found.check == "hooks.workers"
    assert "aws-node-termination-handler/managed" in found.what
    assert "budget" in found.why
    assert found.fix.startswith("aws autoscaling delete-tags --tags ")
    assert (
        "ResourceId=workers,ResourceType=auto-scaling-group,Key=aws-node-termination-handler/managed"
        in found.fix
    )


def test_the_tag_removed_the_group_is_ok(autoscaling: Any) -> None:
    # Given the same group once the tag is removed, and a tag of another key that only looks alike
    add_group(autoscaling, "workers")
    tag(autoscaling, "workers", aws_checks.NTH_MANAGED_TAG, "true")
    autoscaling.delete_tags(
        Tags=[
            {"ResourceId": "workers", "ResourceType": "auto-scaling-group", "Key": aws_checks.NTH_MANAGED_TAG}
        ]
    )
    tag(autoscaling, "workers", "aws-node-termination-handler/managed-by", "platform")

    # When the doctor checks it, Then nothing is said but the hook's own check
    findings = aws_checks.hooks(autoscaling, ["workers"], RULES)
    assert [f.status for f in findings] == ["ok"]


def test_the_tagged_groups_hooks_are_still_checked(autoscaling: Any) -> None:
    # Given a tagged group without nodecycle's terminate hook
    add_group(autoscaling, "workers")
    autoscaling.delete_lifecycle_hook(AutoScalingGroupName="workers", LifecycleHookName="nodecycle-terminate")
    tag(autoscaling, "workers", aws_checks.NTH_MANAGED_TAG)

    # When the doctor checks it, Then both are said: the other handler's tag and the missing hook
    whats = [f.what for f in aws_checks.hooks(autoscaling, ["workers"], RULES)]
    assert len(whats) == 2
    assert any("aws-node-termination-handler/managed" in what for what in whats)
    assert any("no terminate hook" in what for what in whats)


def test_a_terminate_hook_of_another_tool_beside_nodecycles_is_named_in_its_check(autoscaling: Any) -> None:
    # Given a group with nodecycle's terminate hook and another tool's (aws-node-termination-handler's, whose tag
    # is gone: a group half way through docs/migrating.md's step 3). Auto Scaling waits for both: answered by a
    # drainer, the node is drained twice; answered by nobody, each termination waits out its heartbeat timeout.
    # Another tool's hook is allowed (ManagedHooks leaves it alone), so it is no problem: it is said
    add_group(autoscaling, "workers")
    autoscaling.put_lifecycle_hook(
        AutoScalingGroupName="workers",
        LifecycleHookName="nth-terminate",
        LifecycleTransition=aws_checks.TERMINATING,
        HeartbeatTimeout=300,
        DefaultResult="CONTINUE",
    )

    # When the doctor checks the group's hooks
    (found,) = aws_checks.hooks(autoscaling, ["workers"], RULES)

    # Then nodecycle's hook is ok, and its line names the other hook, that Auto Scaling waits for it too
    assert found.status == "ok"
    assert "nth-terminate" in found.what
    assert "Auto Scaling waits for its other terminate hook nth-terminate too" in found.what
