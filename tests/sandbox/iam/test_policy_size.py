"""The roles a deployment creates are held to IAM's policy size quotas ("IAM and AWS STS quotas", IAM user
guide): a role's inline policies total at most 10,240 characters and a managed policy at most 6,144, white
space not counted. IAM refuses more (LimitExceeded) and CloudFormation rolls the stack back; the sandbox
created any role."""

from __future__ import annotations

from typing import Any

import pytest

from nodecycle_sandbox.iam.template import (
    MANAGED_POLICY_SIZE_QUOTA,
    ROLE_POLICY_SIZE_QUOTA,
    PolicyLimitExceeded,
    offline_roles,
    policy_size,
)


def document(resources: int, name_length: int) -> dict[str, Any]:
    arns = [f"arn:aws:sqs:eu-west-1:123456789012:{str(i).zfill(name_length)}" for i in range(resources)]
    return {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": arns}],
    }


def sized(size: int) -> dict[str, Any]:
    """A policy document of exactly ``size`` characters without white space."""
    base = document(1, 1)
    padded = document(1, 1 + size - policy_size([base]))
    assert policy_size([padded]) == size
    return padded


def template(inline: list[dict[str, Any]], attached: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ],
    }
    resources: dict[str, Any] = {
        "Role": {
            "Type": "AWS::IAM::Role",
            "Properties": {
                "AssumeRolePolicyDocument": trust,
                "Policies": [{"PolicyName": f"p{i}", "PolicyDocument": d} for i, d in enumerate(inline)],
            },
        }
    }
    for i, attachment in enumerate(attached):
        name = "ManagedPolicyName" if kind == "AWS::IAM::ManagedPolicy" else "PolicyName"
        resources[f"Attached{i}"] = {
            "Type": kind,
            "Properties": {name: f"a{i}", "Roles": [{"Ref": "Role"}], "PolicyDocument": attachment},
        }
    return {"Resources": resources}


@pytest.mark.parametrize("kind", ["AWS::IAM::RolePolicy", "AWS::IAM::Policy"])
def test_a_role_whose_inline_policies_together_pass_the_quota_is_refused(kind: str) -> None:
    # Given a role whose own inline policy and one attached to it total one character past the quota
    half = ROLE_POLICY_SIZE_QUOTA // 2
    inline, attached = sized(half), sized(ROLE_POLICY_SIZE_QUOTA - half + 1)

    # When the roles are created, Then IAM's refusal comes, naming the role
    with pytest.raises(
        PolicyLimitExceeded, match=r"Maximum policy size of 10240 bytes exceeded for role s-Role"
    ):
        offline_roles(template([inline], [attached], kind), {}, stack_name="s")

    # and one character less is taken
    offline_roles(template([inline], [sized(ROLE_POLICY_SIZE_QUOTA - half)], kind), {}, stack_name="s")


def test_a_managed_policy_past_its_quota_is_refused_and_counts_apart_from_the_inline_ones() -> None:
    # Given a role at its inline quota, with a managed policy at its own quota attached
    at_quota = template(
        [sized(ROLE_POLICY_SIZE_QUOTA)], [sized(MANAGED_POLICY_SIZE_QUOTA)], "AWS::IAM::ManagedPolicy"
    )

    # When the roles are created, Then both are taken (a managed policy is not the role's inline policy)
    offline_roles(at_quota, {})

    # and a managed policy one character larger is refused
    past = template([], [sized(MANAGED_POLICY_SIZE_QUOTA + 1)], "AWS::IAM::ManagedPolicy")
    with pytest.raises(
        PolicyLimitExceeded, match=r"Maximum policy size of 6144 bytes exceeded for policy a0"
    ):
        offline_roles(past, {})
