"""What AWS refuses, the sandbox's IAM refuses too: calls that name their resource another way than the
template's functions do, and policies IAM would not take at all. Each was a way to pass a test "under IAM"
that AWS would fail. moto in this process, the real template deployed by the runner (nothing polls)."""

from __future__ import annotations

from typing import Any

import pytest

from nodecycle_sandbox.iam.identities import IDENTITIES, role_of
from nodecycle_sandbox.iam.policy import PolicyError
from nodecycle_sandbox.runner import Runner
from tests.sandbox.iam import test_enforcement as enforcement
from tests.sandbox.iam.test_enforcement import deployed

client, address, error, instance = (
    enforcement.client,
    enforcement.address,
    enforcement.error,
    enforcement.instance,
)
Deployed = tuple[str, Runner]
__all__ = ["deployed"]  # (test_enforcement's deployment of the template, used here)
ARN = "arn:aws:iam::123456789012:role/probe"


def public_ip(deployed: Deployed, allocation: str) -> str:
    (found,) = client(deployed, "ec2").describe_addresses(AllocationIds=[allocation])["Addresses"]
    return str(found["PublicIp"])


def addresses(deployed: Deployed) -> set[str]:
    return {a["AllocationId"] for a in client(deployed, "ec2").describe_addresses()["Addresses"]}


# -- an address named by its public IP ---------------------------------------------------------------------
# ReleaseAddress, AssociateAddress and DisassociateAddress still take the address's PublicIp (deprecated,
# EC2 API reference) instead of its AllocationId / AssociationId. IAM authorizes the call on the address
# whichever names it ("Actions, resources, and condition keys for Amazon EC2": elastic-ip* for all three,
# with aws:ResourceTag). The sandbox looked the address up by its ids only and, finding none, authorized
# nothing: moto then released a pool address past the Deny, or another owner's, by any role.


def test_a_pool_address_is_not_released_by_its_public_ip_either(deployed: Deployed) -> None:
    allocation = address(deployed, **{"nodecycle:owner": "nodecycle", "nodecycle:pool": "blue"})
    denied = error(
        client(deployed, "ec2", "EipFunction").release_address, PublicIp=public_ip(deployed, allocation)
    )
    assert denied["Code"] == "UnauthorizedOperation"
    assert "with an explicit deny in an identity-based policy" in denied["Message"]
    assert allocation in addresses(deployed)


def test_a_function_without_the_permission_releases_nothing_by_public_ip(deployed: Deployed) -> None:
    allocation = address(deployed, **{"nodecycle:owner": "nodecycle"})
    denied = error(
        client(deployed, "ec2", "IntakeFunction").release_address, PublicIp=public_ip(deployed, allocation)
    )
    assert denied["Code"] == "UnauthorizedOperation"
    assert (
        f"ec2:ReleaseAddress on resource: arn:aws:ec2:eu-west-1:123456789012:elastic-ip/{allocation}"
        in (denied["Message"])
    )
    assert allocation in addresses(deployed)


def test_another_owners_address_is_neither_associated_nor_disassociated_by_public_ip(
    deployed: Deployed,
) -> None:
    theirs = address(deployed, **{"nodecycle:owner": "someone-else"})
    ip = public_ip(deployed, theirs)
    target = instance(deployed, enforcement.MANAGED)
    eip = client(deployed, "ec2", "EipFunction")
    assert error(eip.associate_address, PublicIp=ip, InstanceId=target)["Code"] == "UnauthorizedOperation"
    client(deployed, "ec2").associate_address(AllocationId=theirs, InstanceId=target)
    assert error(eip.disassociate_address, PublicIp=ip)["Code"] == "UnauthorizedOperation"
    (still,) = client(deployed, "ec2").describe_addresses(AllocationIds=[theirs])["Addresses"]
    assert still.get("InstanceId") == target


# -- tagging ----------------------------------------------------------------------------------------------
# CreateTags is authorized on each resource it tags ("Actions, resources, and condition keys for Amazon
# EC2": CreateTags, on elastic-ip, instance, network-interface...). The sandbox read the resources from
# the wire names (ResourceId.N, Tag.N) where moto's parser gives the model's (Resources, Tags): it found
# none and authorized nothing, so any function could tag anything, e.g. put its owner's tag on another
# owner's address and then release it.


def test_a_function_without_the_permission_tags_nothing(deployed: Deployed) -> None:
    theirs = address(deployed, **{"nodecycle:owner": "someone-else"})
    tags = [{"Key": "nodecycle:owner", "Value": "nodecycle"}]
    for function in ("IntakeFunction", "EipFunction", "SweeperFunction"):
        tagging = client(deployed, "ec2", function).create_tags
        denied = error(tagging, Resources=[theirs], Tags=tags)
        assert denied["Code"] == "UnauthorizedOperation", function
        assert (
            f"ec2:CreateTags on resource: arn:aws:ec2:eu-west-1:123456789012:elastic-ip/{theirs}"
            in (denied["Message"])
        )
    (found,) = client(deployed, "ec2").describe_addresses(AllocationIds=[theirs])["Addresses"]
    assert {t["Key"]: t["Value"] for t in found["Tags"]} == {"nodecycle:owner": "someone-else"}


# -- tagging an existing resource ----------------------------------------------------------------------------
# CreateTags on an existing resource carries the resource's own tags as aws:ResourceTag/<key> (and
# ec2:ResourceTag/<key>) besides the requested ones ("Actions, resources, and condition keys for Amazon
# EC2", CreateTags; "Tag your Amazon EC2 resources", controlling access): a Deny keyed on an existing tag
# applies. The sandbox gave CreateTags the request's tags only, so such a Deny never matched.


def test_tagging_an_existing_address_is_judged_on_its_current_tags_too(deployed: Deployed) -> None:
    allocation = address(deployed, **{"nodecycle:owner": "nodecycle"})
    before = len(IDENTITIES.journal())
    tags = [{"Key": "note", "Value": "x"}]
    error(client(deployed, "ec2", "EipFunction").create_tags, Resources=[allocation], Tags=tags)
    (entry,) = [e for e in IDENTITIES.journal()[before:] if e.action == "ec2:CreateTags"]
    assert entry.context["aws:resourcetag/nodecycle:owner"] == ("nodecycle",)
    assert entry.context["ec2:resourcetag/nodecycle:owner"] == ("nodecycle",)
    assert entry.context["aws:requesttag/note"] == ("x",)


# -- policies IAM does not take ------------------------------------------------------------------------------
# "IAM JSON policy elements: Resource": an identity-based policy's statement must have Resource or
# NotResource (IAM answers MalformedPolicyDocument "Policy statement must contain resources."); "...:
# Principal": an identity-based policy cannot name a principal ("Policy document should not specify a
# principal."), and a role trust policy names one and no Resource ("Has prohibited field Resource"). The
# sandbox took a statement without a resource as one on every resource.


def spec(policy: dict[str, Any], trust: dict[str, Any] | None = None) -> dict[str, Any]:
    trust = trust or {
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ]
    }
    return {
        "arn": ARN,
        "trust": trust,
        "policies": [{"source": "probe/p", "document": {"Statement": [policy]}}],
    }


@pytest.mark.parametrize(
    "statement",
    [
        {"Effect": "Allow", "Action": "ec2:ReleaseAddress"},
        {"Effect": "Allow", "Action": "ec2:ReleaseAddress", "Resource": "*", "Principal": "*"},
        {"Effect": "Deny", "NotAction": "ec2:Describe*", "Principal": {"AWS": "*"}, "Resource": "*"},
    ],
)
def test_an_identity_policy_iam_would_not_take_is_refused(statement: dict[str, Any]) -> None:
    with pytest.raises(PolicyError):
        role_of(spec(statement))


@pytest.mark.parametrize(
    "statement",
    [
        {"Effect": "Allow", "Action": "sts:AssumeRole", "Resource": "*", "Principal": {"Service": "x"}},
        {"Effect": "Allow", "Action": "sts:AssumeRole"},
    ],
)
def test_a_trust_policy_iam_would_not_take_is_refused(statement: dict[str, Any]) -> None:
    allowed = {"Effect": "Allow", "Action": "ec2:DescribeInstances", "Resource": "*"}
    with pytest.raises(PolicyError):
        role_of(spec(allowed, {"Statement": [statement]}))
