"""An AssociateAddress the EIP function's role is refused on the INSTANCE side because the instance's tags have not
reached it yet, on moto with the sandbox's IAM enforcement and the role as the template writes it.

The template grants the instance side on instances by their tags alone: ``aws:autoscaling:groupName`` (managed or
retiring groups by name) or ``nodecycle:owner`` (groups managed by tag). Auto Scaling writes an instance's tags (its
group name, the group's tags that propagate at launch) as a step of the launch, and they may show on the instance
moments after it (instances seen without their tags for the first seconds: "AWS Trivia - Broken user data and
instance tag timing", unixdaemon.net; Auto Scaling's tagging guide: the group's tags are applied to the instances it
launches, with no promise of when). An instance without either tag is granted by no statement: EC2 answers
UnauthorizedOperation, as for any denial.

The adapter took that refusal for the address's: a pool launch told the pool's line each address it tried refused
(kept from the line's other launches for REFUSED_FOR), and, its pool growing when empty, at its next look (the tags
there by then) grew the pool past them by a new address, allocated into the pool for good. The refusal is the
instance's: no address is told refused, the next look takes the pool's free address, and the outcome, when the
tags never come, names the instance's missing tags."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from moto.core import DEFAULT_ACCOUNT_ID as ACCOUNT_ID
from moto.ec2.models import ec2_backends

from nodecycle.adapters.aws import clients
from nodecycle.adapters.aws.address_lines import DynamoAddressLines
from nodecycle.adapters.aws.addresses import Ec2Addresses, InstanceGrants
from nodecycle.domain.eip.line import line_key
from nodecycle.domain.model import Step
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.addresses import OWNER_TAG, POOL_TAG, InstanceRefused
from tests.functions.eip.conftest import (
    IMAGE,
    Clock,
    addresses,
    allocate,
    api_calls,
    current,
    due_now,
    given,
    now,
    pool_function,
    run_while,
    work_event,
)
from tests.functions.eip.test_instance_of_another_owner_refused import GROUP, OWNER, POOL, as_role
from tests.support.functions import LambdaContext
from tests.support.stack import Stack
from tests.unit.eip.fakes import launch_record

GROUP_NAME_TAG = "aws:autoscaling:groupName"


def instance_without_its_tags() -> str:
    """A running instance of group ``nodes`` whose tags Auto Scaling has not written yet."""
    ec2: Any = boto3.client("ec2")
    launched = ec2.run_instances(ImageId=IMAGE, MinCount=1, MaxCount=1, InstanceType="t4g.small")
    return str(launched["Instances"][0]["InstanceId"])


def tags_arrive(instance: str) -> None:
    """Auto Scaling writes the instance's group name (a tag no caller may write: aws: is reserved)."""
    region = boto3.client("ec2").meta.region_name
    ec2_backends[ACCOUNT_ID][region].create_tags([instance], {GROUP_NAME_TAG: GROUP})


@pytest.mark.parametrize("mode", ["allocate", "pool"])
def test_an_instance_without_its_tags_yet_is_the_instances_refusal_naming_them(
    stack: Stack, mode: str
) -> None:
    # Given an address of this owner (of the pool, in pool mode), and an instance whose tags have not arrived
    tags = {OWNER_TAG: OWNER, **({POOL_TAG: POOL} if mode == "pool" else {})}
    address = allocate(**tags)
    instance = instance_without_its_tags()
    adapter = Ec2Addresses(as_role(mode))

    # When the role associates them, Then the refusal is the instance's, naming the tags it lacks
    with pytest.raises(InstanceRefused, match=GROUP_NAME_TAG):
        adapter.associate(address, instance)

    # And once its tags arrive, the same address is associated with it
    tags_arrive(instance)
    assert adapter.associate(address, instance)


def test_a_pool_launch_whose_instance_tags_come_late_takes_the_free_address_and_grows_no_pool(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a pool of one free address, growing when empty, and an instance whose tags have not arrived; the eip
    # function's EC2 calls made by its role
    (free,) = [allocate(**{OWNER_TAG: OWNER, POOL_TAG: POOL})]
    instance = instance_without_its_tags()
    ec2 = as_role("pool")
    calls = api_calls(ec2)
    made = clients.client
    monkeypatch.setattr(clients, "client", lambda service: ec2 if service == "ec2" else made(service))
    fn = pool_function(monkeypatch, POOL, grows=True)
    record = given(stack, launch_record(instance, at=now()))

    # When its launch looks once, refused
    response = fn.handler(work_event(due_now(stack, current(stack, record))), LambdaContext())
    assert response.get("batchItemFailures", []) == []
    assert calls["AssociateAddress"] == 1

    # Then the pool's line was told no address refused
    assert DynamoAddressLines(stack.table).refusals(line_key(OWNER, POOL)).by == {}

    # And when its tags arrive and it runs on, it takes the free address: the pool did not grow
    tags_arrive(instance)
    launched = run_while(fn, stack, Clock(), record, Step.ASSIGN_EIP)
    assert launched.result is not ActionResult.ABANDON
    holders = {a["AllocationId"]: a.get("InstanceId") for a in addresses(**{f"tag:{POOL_TAG}": POOL})}
    assert holders == {free: instance}
    assert calls["AllocateAddress"] == 0


def test_an_instance_tagged_for_this_owner_by_its_launch_template_before_its_group_name_is_the_instances_refusal(
    stack: Stack,
) -> None:
    # Given a stack managing group "nodes" by name alone, the adapter told so; an address of this owner's pool; and an
    # instance whose launch template tags it nodecycle:owner for this stack (its tags come with RunInstances) while
    # Auto Scaling's group name has not reached it yet: InstancesOfGroupsByName grants an instance by its group name
    # alone (its owner tag only keeps another owner's out), and no statement grants it by its owner tag in this stack
    address = allocate(**{OWNER_TAG: OWNER, POOL_TAG: POOL})
    ec2: Any = boto3.client("ec2")
    launched = ec2.run_instances(
        ImageId=IMAGE,
        MinCount=1,
        MaxCount=1,
        InstanceType="t4g.small",
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": OWNER_TAG, "Value": OWNER}]}],
    )
    instance = str(launched["Instances"][0]["InstanceId"])
    adapter = Ec2Addresses(as_role("pool"), grants=InstanceGrants(names=frozenset({GROUP})))

    # When the role associates them, Then the refusal is the instance's, naming the group name it lacks (told as the
    # address's, a pool launch went on past each address of its pool and grew it past them for good)
    with pytest.raises(InstanceRefused, match=GROUP_NAME_TAG):
        adapter.associate(address, instance)

    # And once its group name arrives, the same address is associated with it
    tags_arrive(instance)
    assert adapter.associate(address, instance)
