"""Instances of a stack's group tagged ``nodecycle:owner`` for another owner: the tag a group propagates is copied
to an instance at its launch only (Auto Scaling, CreateOrUpdateTags: "instances that are already running will not
get the new or updated tag"), so a group handed over by retagging it, or retagged for a stack's new owner id (the
runbook's two procedures), keeps its running and warm-pool instances tagged for the owner before. An instance's own
owner tag decides whose its disruptions are (intake: a Spot warning, a rebalance, a maintenance, a stop or
termination told by EC2 is taken in by the owner its tag names, or by nobody once that stack is gone), and the EIP
role may associate addresses only with instances tagged for its own owner: this stack's Spot instances drained by
another stack or by none, its warm pool's launches refused their addresses. The doctor said nothing of it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING

import boto3
import pytest
from moto import mock_aws

from nodecycle_cli.deployment import find
from nodecycle_cli.doctor import Doctor
from nodecycle_cli.doctor.findings import Finding, Status
from tests.functions.test_doctor_refused_reads import REGION
from tests.functions.test_doctor_stack_state import ARGS

if TYPE_CHECKING:
    from mypy_boto3_autoscaling.type_defs import TagTypeDef

CHECK = "instances.owner"


@pytest.fixture
def aws() -> Iterator[boto3.Session]:
    with mock_aws():
        session = boto3.Session(region_name=REGION)
        session.client("autoscaling").create_launch_configuration(
            LaunchConfigurationName="workers", ImageId="ami-12c6146b", InstanceType="t3.micro"
        )
        yield session


def stack(aws: boto3.Session, owner: str, groups: str) -> None:
    """Stack "nodecycle" of owner id ``owner`` naming ``groups`` in its ManagedGroups."""
    template = {
        "Parameters": {"ManagedGroups": {"Type": "String"}},
        "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {
            "OwnerId": {"Value": owner},
            "LifecycleTableName": {"Value": "nodecycle-LifecycleTable"},
        },
    }
    aws.client("cloudformation").create_stack(
        StackName="nodecycle",
        TemplateBody=json.dumps(template),
        Parameters=[{"ParameterKey": "ManagedGroups", "ParameterValue": groups}],
    )


def group(aws: boto3.Session, name: str, size: int, owner: str | None) -> list[str]:
    """Group ``name`` of ``size`` instances, its owner tag (if any) propagated to them at their launch."""
    autoscaling = aws.client("autoscaling")
    tags = [] if owner is None else [owner_tag(name, owner)]
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=name,
        LaunchConfigurationName="workers",
        MinSize=0,
        MaxSize=10,
        DesiredCapacity=size,
        AvailabilityZones=[f"{REGION}a"],
        Tags=tags,
    )
    return instances(aws, name)


def owner_tag(name: str, owner: str) -> TagTypeDef:
    return {
        "ResourceId": name,
        "ResourceType": "auto-scaling-group",
        "Key": "nodecycle:owner",
        "Value": owner,
        "PropagateAtLaunch": True,
    }


def instances(aws: boto3.Session, name: str) -> list[str]:
    (described,) = aws.client("autoscaling").describe_auto_scaling_groups(AutoScalingGroupNames=[name])[
        "AutoScalingGroups"
    ]
    return sorted(i["InstanceId"] for i in described["Instances"])


def examined(aws: boto3.Session) -> list[Finding]:
    return [f for f in Doctor(ARGS, aws, find(aws, "nodecycle")).examine() if f.check == CHECK]


def test_instances_of_a_group_retagged_for_this_owner_still_tagged_for_the_owner_before_are_a_problem(
    aws: boto3.Session,
) -> None:
    # Given group "nodes" of two instances launched while it was tagged for owner "team-old", then retagged for
    # "team" (the owner id changed, as the runbook says), and one more instance launched since; and group "spare"
    # of untagged instances
    before = group(aws, "nodes", 2, "team-old")
    autoscaling = aws.client("autoscaling")
    autoscaling.create_or_update_tags(Tags=[owner_tag("nodes", "team")])
    autoscaling.set_desired_capacity(AutoScalingGroupName="nodes", DesiredCapacity=3)
    since = sorted(set(instances(aws, "nodes")) - set(before))
    group(aws, "spare", 1, None)
    stack(aws, "team", "nodes,spare")

    # When the doctor examines stack "nodecycle" of owner id "team"
    found = examined(aws)

    # Then one problem names the group, the two instances still tagged for team-old, and the tag that fixes them
    assert [f.status for f in found] == [Status.PROBLEM], found
    (problem,) = found
    assert "group nodes" in problem.what
    assert "team-old" in problem.what
    for instance in before:
        assert instance in problem.what
        assert instance in problem.fix
    assert since[0] not in problem.what
    assert "spare" not in problem.what
    assert "Key=nodecycle:owner,Value=team" in problem.fix


def test_instances_tagged_for_this_owner_or_untagged_are_fine(aws: boto3.Session) -> None:
    group(aws, "nodes", 2, "team")
    group(aws, "spare", 1, None)
    stack(aws, "team", "nodes,spare")

    assert [f.status for f in examined(aws)] == [Status.OK]
