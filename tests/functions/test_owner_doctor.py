"""``nodecycle doctor`` on a group that two stacks would share: named in this stack's ManagedGroups but tagged
nodecycle:owner for another owner. Intake leaves its actions to that owner (invariant 3; a log line at error
level per event), so its hooks are not this stack's to vouch for: the doctor must say so."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
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


def tag(autoscaling: Any, group: str, owner: str) -> None:
    autoscaling.create_or_update_tags(
        Tags=[
            {
                "ResourceId": group,
                "ResourceType": "auto-scaling-group",
                "Key": "nodecycle:owner",
                "Value": owner,
                "PropagateAtLaunch": False,
            }
        ]
    )


def test_a_named_group_tagged_for_another_owner_is_a_problem_the_doctor_names(autoscaling: Any) -> None:
    # Given stack "team" naming groups "theirs" (tagged nodecycle:owner=team-a: that stack's), "Theirs-too"
    # (tagged Team: another owner, by case), "ours" (tagged team) and "untagged", each with its terminate hook
    for group, owner in (("theirs", "team-a"), ("theirs-too", "Team"), ("ours", "team"), ("untagged", None)):
        add_group(autoscaling, group)
        if owner is not None:
            tag(autoscaling, group, owner)

    # When the doctor checks the groups' hooks for owner "team"
    findings = aws_checks.hooks(
        autoscaling, ["theirs", "theirs-too", "ours", "untagged"], replace(RULES, owner="team")
    )

    # Then the groups tagged for another owner are problems that name that owner; the others are fine
    problems = {f.check: f.what for f in findings if f.status != "ok"}
    assert set(problems) == {"hooks.theirs", "hooks.theirs-too"}
    assert "team-a" in problems["hooks.theirs"]
    assert "Team" in problems["hooks.theirs-too"]
