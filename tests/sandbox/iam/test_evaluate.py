"""The sandbox's IAM evaluator: statements, wildcards, Allow and Deny, and the condition operators the
template uses, with AWS's rules for missing keys and multi-valued keys."""

from __future__ import annotations

from typing import Any

import pytest

from nodecycle_sandbox.iam import Decision, PolicyError, Request, evaluate, parse_policy
from nodecycle_sandbox.iam.conditions import ConditionError
from nodecycle_sandbox.iam.enforce import AccessDenied, authorize
from nodecycle_sandbox.iam.evaluate import context_of
from nodecycle_sandbox.iam.identities import Principal, role_of
from nodecycle_sandbox.iam.matching import arn_matches

EIP = "arn:aws:ec2:eu-west-1:123456789012:elastic-ip/eipalloc-1"
GROUP = "arn:aws:autoscaling:eu-west-1:123456789012:autoScalingGroup:1a2b:autoScalingGroupName/nodes"


def decide(
    statements: list[dict[str, Any]], action: str, resource: str = "*", /, **context: str | list[str]
) -> Decision:
    policy = parse_policy({"Version": "2012-10-17", "Statement": statements}, source="test")
    return evaluate(policy, Request(action, resource, context_of(context))).decision


def allow(action: Any, resource: Any = "*", **extra: Any) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": action, "Resource": resource, **extra}


def test_nothing_is_allowed_without_a_statement_that_allows_it() -> None:
    assert decide([], "ec2:ReleaseAddress", EIP) is Decision.IMPLICIT_DENY
    assert decide([allow("ec2:DescribeAddresses")], "ec2:ReleaseAddress", EIP) is Decision.IMPLICIT_DENY


def test_actions_match_with_wildcards_and_without_regard_to_case() -> None:
    assert decide([allow("ec2:Describe*")], "ec2:DescribeInstances") is Decision.ALLOW
    assert decide([allow("EC2:describeinstances")], "ec2:DescribeInstances") is Decision.ALLOW
    assert decide([allow("ec2:Describe?ddresses")], "ec2:DescribeAddresses") is Decision.ALLOW
    assert decide([allow("ec2:Describe*")], "ec2:ReleaseAddress") is Decision.IMPLICIT_DENY


def test_not_action_allows_everything_else() -> None:
    statement = {"Effect": "Allow", "NotAction": "ec2:ReleaseAddress", "Resource": "*"}
    assert decide([statement], "ec2:AssociateAddress", EIP) is Decision.ALLOW
    assert decide([statement], "ec2:ReleaseAddress", EIP) is Decision.IMPLICIT_DENY


def test_resources_match_segment_by_segment_and_the_resource_part_as_a_whole() -> None:
    assert arn_matches("arn:aws:ec2:eu-west-1:123456789012:elastic-ip/*", EIP)
    assert arn_matches("arn:aws:autoscaling:*:*:autoScalingGroup:*:autoScalingGroupName/nodes", GROUP)
    assert not arn_matches("arn:aws:autoscaling:*:*:autoScalingGroup:*:autoScalingGroupName/node", GROUP)
    # A wildcard in the region never spans into the account
    assert not arn_matches("arn:aws:ec2:eu-*:elastic-ip/*", EIP)
    assert not arn_matches("arn:aws:ec2:eu-west-1:123456789012:instance/*", EIP)
    assert arn_matches("*", EIP)


def test_not_resource_applies_to_every_other_resource() -> None:
    statement = {"Effect": "Allow", "Action": "ec2:ReleaseAddress", "NotResource": EIP}
    assert decide([statement], "ec2:ReleaseAddress", EIP) is Decision.IMPLICIT_DENY
    assert decide([statement], "ec2:ReleaseAddress", EIP + "2") is Decision.ALLOW


def test_an_explicit_deny_wins_over_any_allow() -> None:
    statements = [
        allow("ec2:*", "*"),
        {
            "Effect": "Deny",
            "Action": "ec2:ReleaseAddress",
            "Resource": "*",
            "Condition": {"Null": {"aws:ResourceTag/nodecycle:pool": "false"}},
        },
    ]
    pooled = {"aws:ResourceTag/nodecycle:pool": "blue"}
    assert decide(statements, "ec2:ReleaseAddress", EIP, **pooled) is Decision.EXPLICIT_DENY
    assert decide(statements, "ec2:ReleaseAddress", EIP) is Decision.ALLOW


def test_string_equals_needs_the_key_and_one_of_the_values() -> None:
    statement = allow(
        "ec2:ReleaseAddress", EIP, Condition={"StringEquals": {"aws:ResourceTag/nodecycle:owner": ["a", "b"]}}
    )
    assert (
        decide([statement], "ec2:ReleaseAddress", EIP, **{"aws:ResourceTag/nodecycle:owner": "b"}) == "allow"
    )
    assert (
        decide([statement], "ec2:ReleaseAddress", EIP, **{"aws:ResourceTag/nodecycle:owner": "c"}) != "allow"
    )
    assert decide([statement], "ec2:ReleaseAddress", EIP) is Decision.IMPLICIT_DENY  # no such tag


def test_condition_key_names_compare_without_regard_to_case_but_values_do_not() -> None:
    statement = allow("ec2:ReleaseAddress", EIP, Condition={"StringEquals": {"AWS:ResourceTag/Owner": "a"}})
    assert decide([statement], "ec2:ReleaseAddress", EIP, **{"aws:resourcetag/owner": "a"}) == "allow"
    assert decide([statement], "ec2:ReleaseAddress", EIP, **{"aws:resourcetag/owner": "A"}) != "allow"


def test_every_operator_and_every_key_of_a_block_must_hold() -> None:
    statement = allow(
        "ec2:CreateTags",
        "*",
        Condition={
            "StringEquals": {"ec2:CreateAction": "AllocateAddress", "aws:RequestTag/nodecycle:owner": "a"},
            "ForAllValues:StringLike": {"aws:TagKeys": "nodecycle:*"},
        },
    )
    good = {"ec2:CreateAction": "AllocateAddress", "aws:RequestTag/nodecycle:owner": "a"}
    tags = {"aws:TagKeys": ["nodecycle:owner", "nodecycle:group"]}
    assert decide([statement], "ec2:CreateTags", **good, **tags) is Decision.ALLOW
    assert (
        decide([statement], "ec2:CreateTags", **{**good, "ec2:CreateAction": "CreateTags"}, **tags) != "allow"
    )
    assert (
        decide([statement], "ec2:CreateTags", **good, **{"aws:TagKeys": ["nodecycle:owner", "x"]}) != "allow"
    )


def test_negated_operators_hold_when_the_key_is_missing() -> None:
    statement = allow("ec2:ReleaseAddress", EIP, Condition={"StringNotEquals": {"aws:ResourceTag/pool": "x"}})
    assert decide([statement], "ec2:ReleaseAddress", EIP) is Decision.ALLOW
    assert decide([statement], "ec2:ReleaseAddress", EIP, **{"aws:ResourceTag/pool": "x"}) != "allow"
    assert decide([statement], "ec2:ReleaseAddress", EIP, **{"aws:ResourceTag/pool": "y"}) == "allow"


def test_if_exists_holds_when_the_key_is_missing() -> None:
    statement = allow(
        "ec2:ReleaseAddress", EIP, Condition={"StringEqualsIfExists": {"aws:ResourceTag/o": "a"}}
    )
    assert decide([statement], "ec2:ReleaseAddress", EIP) is Decision.ALLOW
    assert decide([statement], "ec2:ReleaseAddress", EIP, **{"aws:ResourceTag/o": "b"}) != "allow"


def test_string_like_matches_wildcards_in_values() -> None:
    statement = allow("sqs:SendMessage", "*", Condition={"StringLike": {"aws:SourceArn": "arn:aws:*:q-?"}})
    assert decide([statement], "sqs:SendMessage", **{"aws:SourceArn": "arn:aws:sqs:q-1"}) == "allow"
    assert decide([statement], "sqs:SendMessage", **{"aws:SourceArn": "arn:aws:sqs:q-10"}) != "allow"


def test_arn_operators_match_arns_segment_by_segment() -> None:
    statement = allow(
        "sqs:SendMessage",
        "*",
        Condition={"ArnLike": {"aws:SourceArn": "arn:aws:autoscaling:*:*:autoScalingGroup:*"}},
    )
    assert decide([statement], "sqs:SendMessage", **{"aws:SourceArn": GROUP}) is Decision.ALLOW
    statement = allow("sqs:SendMessage", "*", Condition={"ArnEquals": {"aws:SourceArn": GROUP}})
    assert decide([statement], "sqs:SendMessage", **{"aws:SourceArn": GROUP}) is Decision.ALLOW
    assert decide([statement], "sqs:SendMessage", **{"aws:SourceArn": GROUP + "x"}) != "allow"
    statement = allow("sqs:SendMessage", "*", Condition={"ArnNotLike": {"aws:SourceArn": GROUP}})
    assert decide([statement], "sqs:SendMessage", **{"aws:SourceArn": GROUP}) != "allow"


def test_null_tests_whether_a_key_is_present() -> None:
    present = allow(
        "ec2:AssociateAddress",
        "*",
        Condition={"Null": {"aws:ResourceTag/aws:autoscaling:groupName": "false"}},
    )
    absent = allow("ec2:AssociateAddress", "*", Condition={"Null": {"aws:ResourceTag/x": "true"}})
    tagged = {"aws:ResourceTag/aws:autoscaling:groupName": "nodes"}
    assert decide([present], "ec2:AssociateAddress", **tagged) is Decision.ALLOW
    assert decide([present], "ec2:AssociateAddress") is Decision.IMPLICIT_DENY
    assert decide([absent], "ec2:AssociateAddress") is Decision.ALLOW
    assert decide([absent], "ec2:AssociateAddress", **{"aws:ResourceTag/x": "1"}) != "allow"


def test_for_all_values_holds_for_no_values_and_for_any_value_needs_one() -> None:
    for_all = allow(
        "ec2:CreateTags", "*", Condition={"ForAllValues:StringEquals": {"aws:TagKeys": ["a", "b"]}}
    )
    for_any = allow("ec2:CreateTags", "*", Condition={"ForAnyValue:StringEquals": {"aws:TagKeys": ["a"]}})
    assert decide([for_all], "ec2:CreateTags") is Decision.ALLOW  # AWS's known pitfall: vacuously true
    assert decide([for_all], "ec2:CreateTags", **{"aws:TagKeys": ["a", "b"]}) is Decision.ALLOW
    assert decide([for_all], "ec2:CreateTags", **{"aws:TagKeys": ["a", "c"]}) != "allow"
    assert decide([for_any], "ec2:CreateTags") is Decision.IMPLICIT_DENY
    assert decide([for_any], "ec2:CreateTags", **{"aws:TagKeys": ["c", "a"]}) is Decision.ALLOW


def test_trust_statements_match_the_principal_and_the_source() -> None:
    trust = parse_policy(
        {
            "Statement": {
                "Effect": "Allow",
                "Principal": {"Service": "autoscaling.amazonaws.com"},
                "Action": "sts:AssumeRole",
                "Condition": {
                    "StringEquals": {"aws:SourceAccount": "123456789012"},
                    "ArnLike": {
                        "aws:SourceArn": "arn:aws:autoscaling:eu-west-1:123456789012:autoScalingGroup:*"
                    },
                },
            }
        }
    )
    service = {"Service": ("autoscaling.amazonaws.com",)}
    good = context_of({"aws:SourceAccount": "123456789012", "aws:SourceArn": GROUP})
    assert evaluate(trust, Request("sts:AssumeRole", "*", good, service)).allowed
    other = context_of({"aws:SourceAccount": "999999999999", "aws:SourceArn": GROUP})
    assert not evaluate(trust, Request("sts:AssumeRole", "*", other, service)).allowed
    lambda_ = {"Service": ("lambda.amazonaws.com",)}
    assert not evaluate(trust, Request("sts:AssumeRole", "*", good, lambda_)).allowed


@pytest.mark.parametrize(
    "statement",
    [
        allow("ec2:ReleaseAddress", "*", Condition={"NumericLessThan": {"ec2:Count": "1"}}),
        allow(
            "ec2:ReleaseAddress", "*", Condition={"StringEquals": {"aws:ResourceTag/o": "${aws:username}"}}
        ),
        allow("ec2:ReleaseAddress", "arn:aws:ec2:*:*:elastic-ip/${aws:username}"),
        {"Effect": "Maybe", "Action": "ec2:ReleaseAddress", "Resource": "*"},
        {"Effect": "Allow", "Action": "ec2:ReleaseAddress", "NotAction": "x", "Resource": "*"},
    ],
)
def test_what_the_evaluator_cannot_honour_is_refused_not_ignored(statement: dict[str, Any]) -> None:
    with pytest.raises((PolicyError, ConditionError)):
        parse_policy({"Statement": [statement]})


def test_an_explicit_deny_refuses_a_call_on_a_resource_that_does_not_exist() -> None:
    # Given a role granted the release of every address, and denied it on every address (a Deny whose condition
    # needs no tag: a service control policy's, a boundary's, or the template's own one day)
    role = role_of(
        {
            "arn": "arn:aws:iam::123456789012:role/r",
            "policies": [
                {
                    "source": "r/p",
                    "document": {
                        "Statement": [
                            allow("ec2:ReleaseAddress"),
                            {"Effect": "Deny", "Action": "ec2:ReleaseAddress", "Resource": "*"},
                        ]
                    },
                }
            ],
        }
    )
    principal = Principal("AKIAEXAMPLEROLE00001", role, "fn", "123456789012")
    missing = Request("ec2:ReleaseAddress", EIP, context_of({}), resource_found=False)

    # When it releases an address that does not exist, Then IAM refuses it (the deny holds whatever the resource's
    # tags), not EC2's InvalidAllocationID.NotFound, which tells the caller the release was permitted
    with pytest.raises(AccessDenied, match="with an explicit deny"):
        authorize(principal, [missing])


def test_a_call_on_a_group_that_does_not_exist_is_judged_by_its_name_and_without_tags() -> None:
    # Given a role granted the completion of actions of the group "nodes" by name, and of any group tagged as its
    # owner's (the template's two grants)
    by_name = "arn:*:autoscaling:*:*:autoScalingGroup:*:autoScalingGroupName/nodes"
    owned = {"StringEquals": {"autoscaling:ResourceTag/nodecycle:owner": "o"}}
    role = role_of(
        {
            "arn": "arn:aws:iam::123456789012:role/r",
            "policies": [
                {
                    "source": "r/p",
                    "document": {
                        "Statement": [
                            allow("autoscaling:CompleteLifecycleAction", by_name),
                            allow(
                                "autoscaling:CompleteLifecycleAction",
                                "arn:aws:autoscaling:*:*:autoScalingGroup:*:autoScalingGroupName/*",
                                Condition=owned,
                            ),
                        ]
                    },
                }
            ],
        }
    )
    principal = Principal("AKIAEXAMPLEROLE00001", role, "fn", "123456789012")

    def missing(name: str) -> Request:
        arn = f"arn:aws:autoscaling:eu-west-1:123456789012:autoScalingGroup:*:autoScalingGroupName/{name}"
        return Request("autoscaling:CompleteLifecycleAction", arn, context_of({}), resource_found=False)

    # When it completes an action of "nodes", gone, Then IAM lets Auto Scaling answer (its name is granted)
    authorize(principal, [missing("nodes")])
    # When it names another group that does not exist, Then IAM refuses it: the name is in the ARN whether or not
    # the group exists, and the grant by tag does not hold for a group without tags (a condition on a key the
    # request does not carry is false). The sandbox let any role granted the action somewhere hear Auto Scaling's
    # ValidationError, which the adapter takes for an action settled.
    with pytest.raises(AccessDenied, match="autoScalingGroupName/other because no identity-based policy"):
        authorize(principal, [missing("other")])
