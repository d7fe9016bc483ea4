"""An AssociateAddress the EIP function's role is refused on the INSTANCE side, on moto with the sandbox's IAM
enforcement and the role as the template writes it: the template grants the instance side on instances of the
managed groups only, and not on one tagged ``nodecycle:owner`` for another owner (InstancesOfGroupsByName's
StringEqualsIfExists; InstancesOfGroupsByTag's StringEquals). AssociateAddress is authorized on the address, the
instance and the interface alike (the Service Authorization Reference for EC2: AssociateAddress, resource types
elastic-ip, instance, network-interface), and EC2 answers every denial the same, UnauthorizedOperation, whichever
resource it was on (its plain message, where there is one, is no contract: older answers carry only the encoded
one, which the role may not decode).

The adapter took that refusal for the address's: a pool launch went on past each address of its pool, two a look,
told each one refused to the pool's line (where the other launches of the line tried them last, or waited as for
an empty pool), and met its policy with a reason naming addresses, not the instance. The refusal is the instance's,
whatever the address: no other is tried for it, the line is told nothing, and the outcome names the owner tag."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import boto3
import pytest

from nodecycle.adapters.aws import clients
from nodecycle.adapters.aws.address_lines import DynamoAddressLines
from nodecycle.adapters.aws.addresses import Ec2Addresses
from nodecycle.domain.eip.assign import REFUSED_ATTEMPTS
from nodecycle.domain.eip.line import line_key
from nodecycle.domain.model import Step
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.addresses import (
    ALLOCATED_AT_TAG,
    OWNER_TAG,
    POOL_TAG,
    AddressRefused,
    InstanceRefused,
)
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
    current,
    due_now,
    given,
    now,
    pool_function,
    run_while,
    work_event,
)
from tests.functions.test_template_parameters import ROOT
from tests.support.functions import LambdaContext, load_function
from tests.support.stack import Stack
from tests.unit.eip.fakes import launch_record

OWNER = "stack-a"  # tests/conftest.py's stack
OTHER = "stack-b"
GROUP = "nodes"
POOL = "ci"
ACCOUNT = "123456789012"
KEY = "AKIAEIPINSTANCEOWNR1"  # this module's own


def as_role(mode: str) -> Any:
    """An EC2 client of the EIP function's role as the template grants it for group ``nodes`` in ``mode``."""
    install()
    parameters = {"ManagedGroups": GROUP, "ClusterName": "prod", "EipMode": mode, "OwnerId": OWNER}
    if mode == "pool":
        parameters["EipPoolName"] = POOL
    role = offline_roles(load_template(ROOT / "template.yaml"), parameters)["EipFunctionRole"]
    IDENTITIES.register(
        roles=[role],
        keys=[{"access_key": KEY, "role_arn": role["arn"], "session_name": "eip", "account": ACCOUNT}],
    )
    return boto3.client(
        "ec2", config=clients.CLIENT_CONFIG, aws_access_key_id=KEY, aws_secret_access_key="eip"
    )


def instance_of_the_group(owner: str | None) -> str:
    """A running instance of group ``nodes``, tagged for ``owner`` (None: no owner tag)."""
    tags = [{"Key": "aws:autoscaling:groupName", "Value": GROUP}]
    if owner is not None:
        tags.append({"Key": OWNER_TAG, "Value": owner})
    ec2: Any = boto3.client("ec2")
    launched = ec2.run_instances(
        ImageId=IMAGE,
        MinCount=1,
        MaxCount=1,
        InstanceType="t4g.small",
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )
    return str(launched["Instances"][0]["InstanceId"])


@pytest.fixture
def role_ec2(stack: Stack) -> Callable[[str], Any]:
    return as_role


def test_an_instance_tagged_for_another_owner_is_the_instances_refusal_naming_the_tag(
    role_ec2: Callable[[str], Any],
) -> None:
    # Given an address of this owner, and an instance of the managed group tagged for another owner
    address = allocate(**{OWNER_TAG: OWNER})
    theirs = instance_of_the_group(OTHER)
    adapter = Ec2Addresses(role_ec2("allocate"))

    # When the role associates them, Then the refusal is the instance's, naming its owner tag
    with pytest.raises(InstanceRefused, match=f"{OWNER_TAG}={OTHER}"):
        adapter.associate(address, theirs)

    # And an instance of the group tagged for this owner, or not tagged for any, takes an address
    assert adapter.associate(address, instance_of_the_group(OWNER))
    assert adapter.associate(allocate(**{OWNER_TAG: OWNER}), instance_of_the_group(None))


@pytest.mark.parametrize("instance_owner", [None, OTHER])
def test_an_address_of_another_owner_stays_the_addresss_refusal(
    role_ec2: Callable[[str], Any], instance_owner: str | None
) -> None:
    # Given an address of another owner, and an instance of the group of no owner, or of the address's
    theirs = allocate(**{OWNER_TAG: OTHER})
    instance = instance_of_the_group(instance_owner)

    # When the role associates them, Then the refusal is the address's (a pool launch goes on to another)
    with pytest.raises(AddressRefused) as refused:
        Ec2Addresses(role_ec2("allocate")).associate(theirs, instance)
    assert not isinstance(refused.value, InstanceRefused)


def test_a_pool_launch_of_an_instance_of_another_owner_meets_its_policy_and_tells_its_pool_nothing(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a pool of six free addresses, and an instance of the group tagged for another owner; the eip function's
    # EC2 calls made by its role
    pool = [allocate(**{OWNER_TAG: OWNER, POOL_TAG: POOL}) for _ in range(6)]
    instance = instance_of_the_group(OTHER)
    ec2 = as_role("pool")
    calls = api_calls(ec2)
    made = clients.client
    monkeypatch.setattr(clients, "client", lambda service: ec2 if service == "ec2" else made(service))
    fn = pool_function(monkeypatch, POOL)
    record = given(stack, launch_record(instance, at=now()))

    # When its launch looks once
    response = fn.handler(work_event(due_now(stack, current(stack, record))), LambdaContext())
    assert response.get("batchItemFailures", []) == []

    # Then it tried one address, and told the pool's line none refused
    assert calls["AssociateAddress"] == 1
    assert DynamoAddressLines(stack.table).refusals(line_key(OWNER, POOL)).by == {}

    # And when it runs on, each run when due, its policy decides after its looks, one association tried each,
    # naming the instance's owner tag
    launched = run_while(fn, stack, Clock(), record, Step.ASSIGN_EIP)
    assert launched.result is ActionResult.ABANDON
    assert f"{OWNER_TAG}={OTHER}" in (launched.outcome or "")
    assert calls["AssociateAddress"] == REFUSED_ATTEMPTS
    assert DynamoAddressLines(stack.table).refusals(line_key(OWNER, POOL)).by == {}
    # (every address of the pool still free in it)
    holders = {a["AllocationId"]: a.get("InstanceId") for a in addresses(**{f"tag:{POOL_TAG}": POOL})}
    assert holders == dict.fromkeys(pool)


def test_an_allocate_launch_of_an_instance_of_another_owner_goes_on_by_its_policy_with_one_address_for_the_sweeper(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an instance of the group tagged for another owner; the eip function in allocate mode, its failure
    # policy continue, its EC2 calls made by its role
    instance = instance_of_the_group(OTHER)
    ec2 = as_role("allocate")
    calls = api_calls(ec2)
    made = clients.client
    monkeypatch.setattr(clients, "client", lambda service: ec2 if service == "ec2" else made(service))
    install()
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "allocate")
    monkeypatch.setenv("NODECYCLE_EIP_FAILURE_POLICY", "continue")
    fn = load_function("eip")

    # When its launch runs, each run when due
    launched = run_while(fn, stack, Clock(), given(stack, launch_record(instance, at=now())), Step.ASSIGN_EIP)

    # Then it went on without an address, the outcome naming the instance's owner tag, after its looks
    assert launched.step is not Step.ASSIGN_EIP
    assert launched.result is not ActionResult.ABANDON
    assert f"{OWNER_TAG}={OTHER}" in (launched.outcome or "")
    assert calls["AssociateAddress"] == REFUSED_ATTEMPTS
    # And it allocated one address, not one a look: unassociated, tagged for the sweeper to free at its grace
    assert calls["AllocateAddress"] == 1
    (left,) = addresses(**{f"tag:{OWNER_TAG}": OWNER})
    assert left.get("AssociationId") is None
    assert ALLOCATED_AT_TAG in {tag["Key"] for tag in left["Tags"]}
