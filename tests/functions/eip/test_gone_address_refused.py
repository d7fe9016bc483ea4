"""The template grants the address actions on addresses carrying the owner tag only, and IAM decides before EC2
looks the address up: a ReleaseAddress or DisassociateAddress of an address (an association) EC2 no longer has is
refused (UnauthorizedOperation: no tag, so the condition fails), not answered InvalidAllocationID.NotFound /
InvalidAssociationID.NotFound. The adapter made a retried release (its first answer lost), a release raced by
another caller and a disassociation already ended idempotent on that NotFound only: under the role each was an
AddressRefused, asked again and again, then the failure policy. On moto with the sandbox's IAM enforcement and the
EIP function's role as the template writes it; a real botocore client in the standard retry mode."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import boto3
import pytest
from botocore.exceptions import ReadTimeoutError

from nodecycle.adapters.aws import clients
from nodecycle.adapters.aws.addresses import Ec2Addresses
from nodecycle.domain.eip import release_unassociated
from nodecycle.domain.ports.addresses import (
    OWNER_TAG,
    AddressNotFound,
    AddressRefused,
    InstanceUnavailable,
)
from nodecycle_sandbox.aws.install import install
from nodecycle_sandbox.iam.identities import IDENTITIES
from nodecycle_sandbox.iam.template import offline_roles
from nodecycle_sandbox.runner.cfn_yaml import load_template
from tests.functions.eip.conftest import addresses, allocate, run_instances
from tests.functions.test_template_parameters import ROOT
from tests.support.stack import Stack
from tests.unit.eip.fakes import OWNER

ACCOUNT = "123456789012"
KEY = "AKIAEIPGONEADDRESS01"  # this module's own


@pytest.fixture
def as_role(stack: Stack) -> Callable[[], Any]:
    """EC2 clients of the EIP function's role as the template grants it (nodecycle's client configuration)."""
    install()
    template = load_template(ROOT / "template.yaml")
    role = offline_roles(
        template, {"ManagedGroups": "nodes", "ClusterName": "prod", "EipMode": "allocate", "OwnerId": OWNER}
    )["EipFunctionRole"]
    IDENTITIES.register(
        roles=[role],
        keys=[{"access_key": KEY, "role_arn": role["arn"], "session_name": "eip", "account": ACCOUNT}],
    )

    def make() -> Any:
        return boto3.client(
            "ec2", config=clients.CLIENT_CONFIG, aws_access_key_id=KEY, aws_secret_access_key="eip"
        )

    return make


def ended_before(client: Any, operation: str, *, lost: bool) -> Any:
    """``client`` whose next ``operation`` finds its address released (its association ended) by the operator
    first: ``lost``, as by this call's first attempt whose answer was lost (a read timeout: botocore sends it
    again); otherwise by another caller just before this call."""
    operator = boto3.client("ec2")
    done: list[bool] = []

    def before_send(request: Any, **_: Any) -> None:
        if done:
            return
        body = request.body.decode() if isinstance(request.body, bytes) else str(request.body)
        params = dict(p.split("=", 1) for p in body.split("&") if "=" in p)
        if operation == "ReleaseAddress":
            operator.release_address(AllocationId=params["AllocationId"])
        else:
            operator.disassociate_address(AssociationId=params["AssociationId"])
        done.append(True)
        if lost:
            raise ReadTimeoutError(endpoint_url=request.url)

    client.meta.events.register_first(f"before-send.ec2.{operation}", before_send)
    return client


@pytest.mark.parametrize(("lost", "ours"), [(True, True), (False, False)])
def test_a_release_of_an_address_already_gone_is_told_as_ec2s_not_found_would_be(
    as_role: Callable[[], Any], lost: bool, ours: bool
) -> None:
    # Given an address of this owner, released before this call's attempt (by its own lost attempt, or another's)
    address = allocate(**{OWNER_TAG: OWNER})
    ec2 = ended_before(as_role(), "ReleaseAddress", lost=lost)

    # When the EIP function's role releases it, Then it is released: by this call when its answer was lost
    assert release_unassociated(Ec2Addresses(ec2), address) is ours
    assert addresses() == []


@pytest.mark.parametrize(("lost", "ours"), [(True, True), (False, False)])
def test_a_disassociation_already_ended_is_told_as_ec2s_not_found_would_be(
    as_role: Callable[[], Any], lost: bool, ours: bool
) -> None:
    # Given an address of this owner on an instance, the association ended before this call's attempt
    (instance,) = run_instances(1)
    address = allocate(**{OWNER_TAG: OWNER})
    association = boto3.client("ec2").associate_address(AllocationId=address, InstanceId=instance)
    ec2 = ended_before(as_role(), "DisassociateAddress", lost=lost)

    # When the role disassociates it, Then the association is ended: by this call when its answer was lost
    assert Ec2Addresses(ec2).disassociate(association["AssociationId"]) is ours


def test_an_address_released_since_is_not_found_at_association(as_role: Callable[[], Any]) -> None:
    # Given an address of this owner that another caller released, When the role associates it, Then not found
    (instance,) = run_instances(1)
    address = allocate(**{OWNER_TAG: OWNER})
    boto3.client("ec2").release_address(AllocationId=address)
    with pytest.raises(AddressNotFound):
        Ec2Addresses(as_role()).associate(address, instance)


def test_a_refusal_of_an_address_that_is_there_stays_a_refusal(as_role: Callable[[], Any]) -> None:
    # Given an address of another owner (there: the condition on its tag refuses the role)
    theirs = allocate(**{OWNER_TAG: "someone-else"})
    adapter = Ec2Addresses(as_role())

    # When the role releases it, Then it is refused, and the address stays
    with pytest.raises(AddressRefused, match="UnauthorizedOperation"):
        adapter.release(theirs)
    assert [a["AllocationId"] for a in addresses()] == [theirs]

    # And an address of this owner is released (the role may: a first attempt, no other call)
    ours = allocate(**{OWNER_TAG: OWNER})
    assert adapter.release(ours) is True


def test_an_instance_ec2_no_longer_has_is_unavailable_not_a_refusal(as_role: Callable[[], Any]) -> None:
    # Given an address of this owner and an instance id EC2 no longer has (terminated and aged out): the role's
    # grant on instances is conditioned on their group's tag, so IAM refuses the association
    address = allocate(**{OWNER_TAG: OWNER})

    # When the role associates the address with it, Then the instance cannot take an address (the step asks its
    # state and ends it, gone), as EC2's InvalidInstanceID.NotFound says, not a refusal asked again and again
    with pytest.raises(InstanceUnavailable):
        Ec2Addresses(as_role()).associate(address, "i-0123456789abcdef0")
