"""A stack that manages its groups by tag (ManagedByTag), a group tagged ``nodecycle:owner`` for it whose tag does not
propagate to its instances (PropagateAtLaunch false), in pool mode with a pool that grows when empty: on moto with the
sandbox's IAM enforcement and the EIP function's role as the template writes it.

The template grants AssociateAddress's instance side, for groups managed by tag, on instances tagged
``nodecycle:owner`` for this stack (InstancesOfGroupsByTag: "the group tag must propagate to its instances"); Auto
Scaling copies a group's tag to the instances it launches only when the tag says PropagateAtLaunch (the Auto Scaling
API reference, Tag: "Determines whether the tag is added to new instances as they are launched in the group"). Intake
takes the group's launches by the group's own tag, so each launch of it comes to the EIP function, and EC2 refuses
every association (UnauthorizedOperation), whatever the address.

The adapter told that refusal as the addresses': each launch tried the pool's addresses, two a look, and, none left
untried, grew the pool past them by one address, refused too; its policy abandoned it, Auto Scaling launched a
replacement, which did the same. The pool grew by one address a launch, allocated into the pool for good (a pool's
addresses are never released), until the account's Elastic IP quota. Now the refusal is the instance's: no address
is tried past the first, the pool does not grow, and the outcome names the tag that does not propagate."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from moto.core import DEFAULT_ACCOUNT_ID as ACCOUNT_ID
from moto.ec2.models import ec2_backends

from nodecycle.adapters.aws import clients
from nodecycle.adapters.aws.addresses import Ec2Addresses, InstanceGrants
from nodecycle.domain.eip.assign import REFUSED_ATTEMPTS
from nodecycle.domain.model import Step
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.addresses import OWNER_TAG, POOL_TAG, AddressRefused, InstanceRefused
from nodecycle_sandbox.aws.install import install
from nodecycle_sandbox.iam.identities import IDENTITIES
from nodecycle_sandbox.iam.template import offline_roles
from nodecycle_sandbox.runner.cfn_yaml import load_template
from tests.functions.eip.conftest import (
    IMAGE,
    Clock,
    addresses,
    allocate,
    api_calls,
    given,
    now,
    pool_function,
    run_while,
)
from tests.functions.test_template_parameters import ROOT
from tests.support.stack import Stack
from tests.unit.eip.fakes import launch_record

OWNER = "stack-a"  # tests/conftest.py's stack
GROUP = "nodes-by-tag"
POOL = "ci"
KEY = "AKIAEIPOWNERBYTAG001"  # this module's own


def by_tag_role(names: str = "") -> Any:
    """An EC2 client of the EIP function's role as the template grants it for groups managed by tag (and by the
    ``names`` given), in pool mode."""
    install()
    parameters = {
        "ManagedGroups": names,
        "ManagedByTag": "true",
        "ClusterName": "prod",
        "EipMode": "pool",
        "EipPoolName": POOL,
        "OwnerId": OWNER,
    }
    role = offline_roles(load_template(ROOT / "template.yaml"), parameters)["EipFunctionRole"]
    IDENTITIES.register(
        roles=[role],
        keys=[{"access_key": KEY, "role_arn": role["arn"], "session_name": "eip", "account": "123456789012"}],
    )
    return boto3.client(
        "ec2", config=clients.CLIENT_CONFIG, aws_access_key_id=KEY, aws_secret_access_key="eip"
    )


def instance_of_the_group(group: str = GROUP) -> str:
    """A running instance of ``group``, tagged by Auto Scaling with its group's name alone (the group's owner tag
    does not propagate)."""
    ec2: Any = boto3.client("ec2")
    launched = ec2.run_instances(ImageId=IMAGE, MinCount=1, MaxCount=1, InstanceType="t4g.small")
    instance = str(launched["Instances"][0]["InstanceId"])
    # (aws: tags are Auto Scaling's to write: no caller may)
    ec2_backends[ACCOUNT_ID][ec2.meta.region_name].create_tags(
        [instance], {"aws:autoscaling:groupName": group}
    )
    return instance


def test_launches_of_a_group_whose_owner_tag_does_not_propagate_grow_no_pool_and_name_the_tag(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a pool of one free address, growing when empty; a stack managing its groups by tag; the eip function's
    # EC2 calls made by its role
    (free,) = [allocate(**{OWNER_TAG: OWNER, POOL_TAG: POOL})]
    ec2 = by_tag_role()
    calls = api_calls(ec2)
    made = clients.client
    monkeypatch.setattr(clients, "client", lambda service: ec2 if service == "ec2" else made(service))
    monkeypatch.setenv("NODECYCLE_MANAGED_GROUPS", "")
    monkeypatch.setenv("NODECYCLE_MANAGED_BY_TAG", "true")
    fn = pool_function(monkeypatch, POOL, grows=True)

    # When three launches of the group run one after the other (each abandoned, Auto Scaling launches another),
    # each run when due
    outcomes = []
    for _ in range(3):
        record = given(stack, launch_record(instance_of_the_group(), at=now()))
        launched = run_while(fn, stack, Clock(), record, Step.ASSIGN_EIP)
        assert launched.result is ActionResult.ABANDON
        outcomes.append(launched.outcome or "")

    # Then the pool did not grow: its one address is still free, none allocated
    holders = {a["AllocationId"]: a.get("InstanceId") for a in addresses(**{f"tag:{POOL_TAG}": POOL})}
    assert holders == {free: None}
    assert calls["AllocateAddress"] == 0
    # And each launch tried one association a look, its outcome naming the owner tag that does not propagate
    assert calls["AssociateAddress"] == 3 * REFUSED_ATTEMPTS
    assert all(OWNER_TAG in outcome and "PropagateAtLaunch" in outcome for outcome in outcomes), outcomes


def test_the_instance_of_a_group_by_name_without_the_owner_tag_leaves_the_refusal_to_the_address(
    stack: Stack,
) -> None:
    # Given a stack managing group "nodes" by name and others by tag, the adapter told so; an address of another
    # owner (refused for its own sake)
    adapter = Ec2Addresses(
        by_tag_role(names="nodes"), grants=InstanceGrants(names=frozenset({"nodes"}), by_tag=True)
    )
    theirs = allocate(**{OWNER_TAG: "stack-b", POOL_TAG: POOL})

    # When it is associated with an instance of the group by name, carrying no owner tag, Then the refusal is the
    # address's (granted by its group's name, the instance is not what EC2 refused)
    with pytest.raises(AddressRefused) as refused:
        adapter.associate(theirs, instance_of_the_group("nodes"))
    assert not isinstance(refused.value, InstanceRefused)

    # And an address of this owner is refused for the instance's sake to an instance of a group by tag whose owner tag
    # did not propagate, naming it; and associated with the instance of the group by name
    ours = allocate(**{OWNER_TAG: OWNER, POOL_TAG: POOL})
    with pytest.raises(InstanceRefused, match="PropagateAtLaunch"):
        adapter.associate(ours, instance_of_the_group())
    assert adapter.associate(ours, instance_of_the_group("nodes"))
