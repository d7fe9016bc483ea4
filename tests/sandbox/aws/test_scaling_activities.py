"""DescribeScalingActivities as AWS answers it (moto answers an empty list): an activity per launch and per
termination, begun before the hooks hold the instance, MidLifecycleAction while they do, newest first, in pages
(see nodecycle_sandbox.aws.activities for the sources)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from botocore.exceptions import ClientError

from nodecycle_sandbox.aws import TERMINATING
from nodecycle_sandbox.aws.group import HookSpec

from .conftest import Emulation

TERMINATE_HOOK = HookSpec("drain", TERMINATING, 60, "CONTINUE")


def test_a_termination_held_by_a_hook_is_an_activity_begun_no_later_than_its_action(aws: Emulation) -> None:
    # Given an instance in service, then terminated through the hook
    group = aws.group(TERMINATE_HOOK, size=1)
    (instance,) = group.in_state("InService")
    group.terminate(instance)
    (action,) = group.actions(transition=TERMINATING)

    # When its group's activities are read
    activities = aws.autoscaling.describe_scaling_activities(AutoScalingGroupName="workers")["Activities"]

    # Then its termination is listed before its launch (in progress first), held by the hook, begun no later than its
    # action; its launch is over
    terminating, launching = [a for a in activities if a["Description"].endswith(instance)]
    assert terminating["Description"] == f"Terminating EC2 instance: {instance}"
    assert terminating["StatusCode"] == "MidLifecycleAction"
    assert "EndTime" not in terminating
    assert terminating["StartTime"] <= datetime.fromtimestamp(action.started_at, UTC)
    assert launching["Description"] == f"Launching a new EC2 instance: {instance}"
    assert (launching["StatusCode"], "EndTime" in launching) == ("Successful", True)

    # And once its action is completed the termination is over
    aws.autoscaling.complete_lifecycle_action(
        AutoScalingGroupName="workers",
        LifecycleHookName="drain",
        InstanceId=instance,
        LifecycleActionResult="CONTINUE",
    )
    (over,) = [
        a
        for a in aws.autoscaling.describe_scaling_activities(AutoScalingGroupName="workers")["Activities"]
        if a["ActivityId"] == terminating["ActivityId"]
    ]
    assert (over["StatusCode"], "EndTime" in over) == ("Successful", True)


def test_activities_come_in_pages_filtered_by_start_and_status(aws: Emulation) -> None:
    # Given three instances launched, then two terminated through the hook
    group = aws.group(TERMINATE_HOOK, size=3)
    group.set_desired(1)
    client = aws.autoscaling

    # Then pages of at most MaxRecords, with a NextToken between them, list all five
    first = client.describe_scaling_activities(AutoScalingGroupName="workers", MaxRecords=2)
    assert len(first["Activities"]) == 2
    assert "NextToken" in first
    pages = client.get_paginator("describe_scaling_activities").paginate(
        AutoScalingGroupName="workers", PaginationConfig={"PageSize": 2}
    )
    assert len([a for page in pages for a in page["Activities"]]) == 5
    # ... the Status filter selects those the hook holds; a start bound later than all of them selects none
    held = client.describe_scaling_activities(
        AutoScalingGroupName="workers", Filters=[{"Name": "Status", "Values": ["MidLifecycleAction"]}]
    )["Activities"]
    assert {a["Description"].split(": ")[1] for a in held} == set(group.in_state("Terminating:Wait"))
    later = (datetime.now(UTC) + timedelta(minutes=1)).isoformat()
    assert not client.describe_scaling_activities(
        AutoScalingGroupName="workers", Filters=[{"Name": "StartTimeLowerBound", "Values": [later]}]
    )["Activities"]
    # ... and what AWS refuses is refused
    with pytest.raises(ClientError, match="maxRecords"):
        client.describe_scaling_activities(AutoScalingGroupName="workers", MaxRecords=101)
    with pytest.raises(ClientError, match="Status filter"):
        client.describe_scaling_activities(Filters=[{"Name": "Status", "Values": ["Successful"]}])


def test_a_deleted_groups_activities_are_listed_only_when_asked(aws: Emulation) -> None:
    # Given a group of one, deleted
    aws.group(size=1)
    client = aws.autoscaling
    client.delete_auto_scaling_group(AutoScalingGroupName="workers", ForceDelete=True)

    # Then its activities are gone from an ordinary answer, and listed with IncludeDeletedGroups
    assert not client.describe_scaling_activities(AutoScalingGroupName="workers")["Activities"]
    listed = client.describe_scaling_activities(AutoScalingGroupName="workers", IncludeDeletedGroups=True)
    assert {a["AutoScalingGroupState"] for a in listed["Activities"]} == {"Deleted"}
