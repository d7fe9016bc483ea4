"""Each function's role, as the template writes it, is granted the calls of the paths no sandbox run takes: AWS
refuses the rest (AccessDenied), which the sandbox's IAM enforcement shows only where a test goes.

The drain dates the action a crossed lifecycle is carried over to by the group's activity that holds its instance
(domain/drain/cleanup.py ``_own_action_began``: ``AutoscalingActions.activity_started``, DescribeScalingActivities);
refused, the lifecycle is not carried over and the action is left to the sweeper's adoption. The sweeper dates an
action it adopts by the same activity (domain/sweep/orphans.py ``_activity_started``); refused, by its own listings
alone, late where its container did not see the action begin.

Intake confirms where Auto Scaling holds an action before it lets a message take over a token taken in under other
naming (domain/intake.py ``_conflicting``: ``AutoscalingActions.confirm``), and tells whether a late event's action
timed out by its instance's lifecycle state (``_timed_out_so``: ``lifecycle_state``). Both read
DescribeAutoScalingInstances; refused, the event fails at every retry (EventBridge tries for an hour) and ends in
the intake dead-letter queue."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from nodecycle.adapters.aws.autoscaling import AutoscalingActions
from nodecycle.domain.model import ActionRef, Transition
from nodecycle_sandbox.aws.install import install
from nodecycle_sandbox.iam.identities import IDENTITIES
from nodecycle_sandbox.iam.template import offline_roles
from nodecycle_sandbox.runner.cfn_yaml import load_template
from tests.support.stack import Stack

from .test_template_parameters import ROOT

ACCOUNT = "123456789012"
KEY = "AKIATEMPLATEINTAKE01"  # this module's own
DRAIN_KEY = "AKIATEMPLATEDRAIN001"
SWEEPER_KEY = "AKIATEMPLATESWEEP001"
GROUP = "nodes-general"
ACTION = ActionRef(
    group=GROUP,
    hook="nodecycle-terminate",
    instance_id="i-0a1b2c3d4e5f60718",
    token="9f0c3d3e-6a8b-4c8e-9d57-2f7b1e0a6c41",
    transition=Transition.TERMINATING,
)


def role_client(role_name: str, key: str) -> Any:
    """An Auto Scaling client of ``role_name`` as the template grants it (moto with the sandbox's IAM enforcement),
    in an account with one managed group."""
    install()
    boto3.client("ec2").create_launch_template(
        LaunchTemplateName="nodes",
        LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "m6g.large"},
    )
    boto3.client("autoscaling").create_auto_scaling_group(
        AutoScalingGroupName=GROUP,
        LaunchTemplate={"LaunchTemplateName": "nodes"},
        MinSize=0,
        MaxSize=1,
        AvailabilityZones=["eu-west-1a"],
    )
    template = load_template(ROOT / "template.yaml")
    role = offline_roles(template, {"ManagedGroups": GROUP, "ClusterName": "prod"})[role_name]
    IDENTITIES.register(
        roles=[role],
        keys=[{"access_key": key, "role_arn": role["arn"], "session_name": role_name, "account": ACCOUNT}],
    )
    return boto3.client("autoscaling", aws_access_key_id=key, aws_secret_access_key=role_name)


@pytest.fixture
def intake_role(stack: Stack) -> Any:
    return role_client("IntakeFunctionRole", KEY)


@pytest.fixture
def drain_role(stack: Stack) -> Any:
    return role_client("DrainFunctionRole", DRAIN_KEY)


def test_intake_may_read_where_an_instance_waits(intake_role: Any) -> None:
    # Given the intake role, When it reads an instance's lifecycle state (a late event's check),
    # Then Auto Scaling answers: the instance is in no group
    assert AutoscalingActions(intake_role).lifecycle_state(ACTION.instance_id) is None


def test_intake_may_confirm_an_action_whose_token_was_taken_in_under_other_naming(intake_role: Any) -> None:
    # Given the intake role, When it confirms where Auto Scaling holds an action (a token conflict),
    # Then the look is answered (no such action held there), not refused
    assert AutoscalingActions(intake_role).confirm(ACTION) is False


def test_the_drain_may_read_when_the_action_it_carries_a_drain_over_to_began(drain_role: Any) -> None:
    # Given the drain's role, When it reads the group's activities (a crossed lifecycle carried over to the action
    # the hook holds its instance by: domain/drain/cleanup.py), Then Auto Scaling answers (none names the instance)
    since = datetime.now(UTC) - timedelta(hours=48)
    assert AutoscalingActions(drain_role).activity_started(GROUP, ACTION.instance_id, since) is None


def test_the_sweeper_may_read_when_an_action_it_adopts_began(stack: Stack) -> None:
    # Given the sweeper's role, When it reads the group's activities (an orphaned action's adoption:
    # domain/sweep/orphans.py), Then Auto Scaling answers (none names the instance), not refused
    sweeper_role = role_client("SweeperFunctionRole", SWEEPER_KEY)
    since = datetime.now(UTC) - timedelta(hours=48)
    assert AutoscalingActions(sweeper_role).activity_started(GROUP, ACTION.instance_id, since) is None


@pytest.mark.parametrize("role_name", ["EipFunctionRole", "SweeperFunctionRole"])
def test_no_role_may_release_an_address_allocated_into_a_pool_once_its_pool_tag_is_removed(
    stack: Stack, role_name: str
) -> None:
    # Given an address the eip function allocated into a pool, whose pool tag the operator removed (retired from
    # the pool: the operator's now), tagged with the owner id as every address nodecycle allocates
    install()
    ec2 = boto3.client("ec2")
    allocation = ec2.allocate_address(
        Domain="vpc",
        TagSpecifications=[
            {
                "ResourceType": "elastic-ip",
                "Tags": [
                    {"Key": "nodecycle:owner", "Value": "nodecycle"},
                    {"Key": "nodecycle:allocated-at", "Value": "2026-12-05T10:00:00+00:00"},
                    {"Key": "nodecycle:allocated-into", "Value": "edge"},
                ],
            }
        ],
    )["AllocationId"]
    template = load_template(ROOT / "template.yaml")
    role = offline_roles(
        template,
        {"ManagedGroups": GROUP, "ClusterName": "prod", "EipMode": "allocate", "OwnerId": "nodecycle"},
    )[role_name]
    key = "AKIATEMPLATERETIRED" + str(len(role_name) % 10)
    IDENTITIES.register(
        roles=[role],
        keys=[{"access_key": key, "role_arn": role["arn"], "session_name": "eip", "account": ACCOUNT}],
    )

    # When the role releases it (a product defect, or a sweep of an older version that took it for its own)
    with pytest.raises(ClientError, match=r"UnauthorizedOperation|AccessDenied"):
        boto3.client("ec2", aws_access_key_id=key, aws_secret_access_key="x").release_address(
            AllocationId=allocation
        )

    # Then EC2 refuses: the address is still there
    assert ec2.describe_addresses(AllocationIds=[allocation])["Addresses"]
