"""EKS keeps with an access entry the role id of the role its ARN named when it was made: "If you don't delete the
access entry and ever recreate the IAM principal, even if it has the same ARN, the access entry won't work" (EKS API
reference, AccessEntry). The sandbox's authenticator let a role deleted and made again in by its old entry."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from nodecycle_sandbox.aws.eks import access_reader
from nodecycle_sandbox.aws.server import MotoServer

REGION = "eu-west-1"
KEY = "AKIASANDBOXOPERATOR0"
ROLE = "drain-role"
TRUST = json.dumps({"Version": "2012-10-17", "Statement": []})


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    server = MotoServer()
    yield server.start()
    server.stop()


def _client(endpoint: str, service: str) -> Any:
    return boto3.client(
        service,  # type: ignore[call-overload]
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=KEY,
        aws_secret_access_key="secret",
    )


def test_an_entry_does_not_let_in_a_role_made_again_under_its_arn(endpoint: str) -> None:
    eks, iam = _client(endpoint, "eks"), _client(endpoint, "iam")
    eks.create_cluster(
        name="recreated",
        roleArn="arn:aws:iam::123456789012:role/eks",
        resourcesVpcConfig={"subnetIds": ["subnet-1"]},
        accessConfig={"authenticationMode": "API_AND_CONFIG_MAP"},
    )
    arn = iam.create_role(RoleName=ROLE, AssumeRolePolicyDocument=TRUST)["Role"]["Arn"]
    eks.create_access_entry(clusterName="recreated", principalArn=arn, kubernetesGroups=["nodecycle-drain"])
    read = access_reader(
        endpoint_url=endpoint, region=REGION, cluster="recreated", access_key=KEY, secret_key="s"
    )
    entry = read(arn).entry
    assert entry is not None
    assert entry.groups == ("nodecycle-drain",)

    # When the role is deleted and made again under the same ARN (the entry left as it was)
    iam.delete_role(RoleName=ROLE)
    iam.create_role(RoleName=ROLE, AssumeRolePolicyDocument=TRUST)

    # Then the entry does not let it in; an entry made again does
    assert read(arn).entry is None
    eks.delete_access_entry(clusterName="recreated", principalArn=arn)
    eks.create_access_entry(clusterName="recreated", principalArn=arn, kubernetesGroups=["nodecycle-drain"])
    assert read(arn).entry is not None
