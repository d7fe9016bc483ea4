"""RetiringGroups: the groups a stack no longer manages whose open lifecycles it still finishes. Their actions
may be completed and heartbeated by the roles that finish lifecycles (drain, EIP, sweeper), not by the intake's,
which takes no new action of them; the functions never read the parameter; the policy fits IAM's quotas with the
longest lists the template accepts."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from nodecycle.settings import DrainSettings, EipSettings, IntakeSettings, SweeperSettings
from nodecycle_sandbox.iam import Request, evaluate, parse_policy
from nodecycle_sandbox.iam.evaluate import context_of
from nodecycle_sandbox.iam.template import StaticResources, offline_roles
from nodecycle_sandbox.runner.cfn_yaml import load_template
from nodecycle_sandbox.runner.intrinsics import Intrinsics, ParameterError, check_parameters

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = load_template(ROOT / "template.yaml")
REGION, ACCOUNT = "eu-west-1", "123456789012"
FINISHING = ("DrainFunctionRole", "EipFunctionRole", "SweeperFunctionRole")
ACTIONS = ("autoscaling:CompleteLifecycleAction", "autoscaling:RecordLifecycleActionHeartbeat")


def _allowed(roles: Mapping[str, Any], role: str, action: str, group: str) -> bool:
    statements = [s for p in roles[role]["policies"] for s in parse_policy(p["document"], source=p["source"])]
    arn = f"arn:aws:autoscaling:{REGION}:{ACCOUNT}:autoScalingGroup:uuid-1:autoScalingGroupName/{group}"
    return evaluate(statements, Request(action, arn, context_of({"aws:RequestedRegion": REGION}))).allowed


def _roles(parameters: Mapping[str, str]) -> Mapping[str, Any]:
    return offline_roles(TEMPLATE, {"ClusterName": "c", **parameters}, region=REGION, account=ACCOUNT)


def test_the_roles_that_finish_lifecycles_may_complete_and_heartbeat_the_actions_of_a_retiring_group() -> (
    None
):
    # Given a stack whose group ng-old moved from ManagedGroups to RetiringGroups
    roles = _roles({"ManagedGroups": "ng-new", "RetiringGroups": "ng-old,ng-older"})

    # Then the drain, EIP and sweeper roles may complete and heartbeat its actions (and the managed group's)
    for role in FINISHING:
        for action in ACTIONS:
            for group in ("ng-new", "ng-old", "ng-older"):
                assert _allowed(roles, role, action, group), f"{role} may not {action} on {group}"
            # and no other group's, nor one only a prefix of a retiring name
            for group in ("ng-other", "ng-ol", "ng-old2"):
                assert not _allowed(roles, role, action, group), f"{role} may {action} on {group}"
    # while the intake's role takes no new action of it: not even a late one's heartbeat
    assert _allowed(roles, "IntakeFunctionRole", ACTIONS[1], "ng-new")
    assert not _allowed(roles, "IntakeFunctionRole", ACTIONS[1], "ng-old")


def _may_associate_with(roles: Mapping[str, Any], role: str, group: str) -> bool:
    statements = [s for p in roles[role]["policies"] for s in parse_policy(p["document"], source=p["source"])]
    arn = f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/i-0123456789abcdef0"
    context = context_of({"aws:RequestedRegion": REGION, "aws:ResourceTag/aws:autoscaling:groupName": group})
    return evaluate(statements, Request("ec2:AssociateAddress", arn, context)).allowed


def test_a_launch_of_a_retiring_group_taken_in_before_gets_its_address() -> None:
    # (an instance refresh launches in the group it drains: the EIP role associates the launch's address with
    # the instance of a retiring group as with one of a managed group; no other role associates at all)
    roles = _roles({"ManagedGroups": "ng-new", "RetiringGroups": "ng-old", "EipMode": "allocate"})
    assert _may_associate_with(roles, "EipFunctionRole", "ng-new")
    assert _may_associate_with(roles, "EipFunctionRole", "ng-old")
    assert not _may_associate_with(roles, "EipFunctionRole", "ng-other")
    for role in ("DrainFunctionRole", "SweeperFunctionRole", "IntakeFunctionRole"):
        assert not _may_associate_with(roles, role, "ng-old")
    assert not _may_associate_with(_roles({"ManagedGroups": "ng-new"}), "EipFunctionRole", "ng-old")


def test_without_retiring_groups_a_group_dropped_from_managed_groups_loses_its_completions() -> None:
    # (what a deployment that only drops the group does: AccessDenied for the actions its records still hold)
    roles = _roles({"ManagedGroups": "ng-new"})
    for role in FINISHING:
        for action in ACTIONS:
            assert not _allowed(roles, role, action, "ng-old")
    # and no policy of the retiring groups is created at all
    resources = StaticResources(TEMPLATE, stack_name="s", region=REGION, account=ACCOUNT)
    resources.intrinsics = Intrinsics(
        TEMPLATE,
        resources=resources,
        stack_name="s",
        region=REGION,
        account=ACCOUNT,
        parameters={"ManagedGroups": "ng-new", "ClusterName": "c"},
    )
    assert not resources.exists("RetiringGroupsPolicy")
    assert not resources.exists("RetiringGroupsInstancesPolicy")


def test_the_functions_never_read_the_retiring_groups() -> None:
    # The intake's groups are ManagedGroups alone: a retiring group's new action is not taken
    resources = StaticResources(TEMPLATE, stack_name="s", region=REGION, account=ACCOUNT)
    parameters = {"ManagedGroups": "ng-new", "RetiringGroups": "ng-old", "ClusterName": "c"}
    resources.intrinsics = Intrinsics(
        TEMPLATE, resources=resources, stack_name="s", region=REGION, account=ACCOUNT, parameters=parameters
    )
    environment = {
        name: str(value)
        for name, value in resources.intrinsics.resolve(
            TEMPLATE["Globals"]["Function"]["Environment"]["Variables"]
        ).items()
    }
    assert not [name for name, value in environment.items() if "ng-old" in value or "RETIRING" in name]
    assert IntakeSettings.from_env(environment).managed_groups == ("ng-new",)
    assert SweeperSettings.from_env(environment).managed_groups == ("ng-new",)  # (the orphans it adopts)
    for settings in (DrainSettings, EipSettings):
        settings.from_env(environment)
    for logical_id, resource in TEMPLATE["Resources"].items():
        if resource["Type"] == "AWS::Serverless::Function":
            assert "RetiringGroups" not in str(resource.get("Properties")), logical_id


def _groups(count: int, length: int) -> str:
    """``count`` distinct group names, ``length`` characters in all with their commas."""
    each = (length - (count - 1)) // count
    names = [f"{i:03d}".ljust(each, "x") for i in range(count)]
    names[-1] += "x" * (length - len(",".join(names)))
    return ",".join(names)


@pytest.mark.parametrize("mode", ["off", "allocate", "pool"])
def test_the_longest_retiring_list_beside_the_longest_managed_list_makes_roles_iam_accepts(mode: str) -> None:
    # Given the longest lists the template accepts, with the longest stack, cluster and pool names
    widest = {"ClusterName": "c" * 100, "EipMode": mode, "EipPoolName": "p" * 255 if mode == "pool" else ""}
    parameters = {**widest, "ManagedGroups": _groups(40, 1500), "RetiringGroups": _groups(10, 400)}
    check_parameters(TEMPLATE, parameters)
    # Then IAM takes every role and the retiring groups' managed policy (PolicyLimitExceeded past a quota)
    roles = offline_roles(TEMPLATE, parameters, stack_name="s" * 128, region="ap-southeast-2")
    for role in FINISHING:
        assert any(
            p["source"].startswith(f"{role}/") and "Retiring" in p["source"] for p in roles[role]["policies"]
        )
    # and one name or one character more is refused before anything is created
    for refused in (_groups(11, 300), _groups(10, 401)):
        with pytest.raises(ParameterError, match="RetiringGroups"):
            check_parameters(TEMPLATE, {**widest, "RetiringGroups": refused})


@pytest.mark.parametrize("groups", ["ng-a, ng-b", "ng-a ,ng-b", " ng-a", "ng-a,", "ng-*", "ng-?"])
def test_a_retiring_list_iam_would_read_otherwise_than_written_is_refused(groups: str) -> None:
    # IAM compares the ARNs literally and reads * and ? as wildcards: a blank would permit no group, a * many
    with pytest.raises(ParameterError, match="RetiringGroups"):
        check_parameters(TEMPLATE, {"ManagedGroups": "ng-new", "RetiringGroups": groups, "ClusterName": "c"})


def test_the_longest_managed_list_with_groups_managed_by_tag_too_makes_roles_iam_accepts() -> None:
    # (the EIP role's inline policies came to 10,370 characters, past IAM's 10,240, before its by-tag grants moved to
    # a managed policy of their own: the stack rolled back)
    parameters = {"ClusterName": "c" * 100, "ManagedGroups": _groups(40, 1500), "ManagedByTag": "true"}
    check_parameters(TEMPLATE, parameters)
    offline_roles(TEMPLATE, parameters, stack_name="s" * 128, region="ap-southeast-2")
