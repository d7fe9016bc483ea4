"""The EKS cluster of the sandbox: moto's cluster object, pointed at the local Kubernetes API server."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from moto.eks.models import eks_backends

from nodecycle_sandbox.aws.eks_access import API_AND_CONFIG_MAP, CONFIG_MAP, configure_access

if TYPE_CHECKING:
    from nodecycle_sandbox.kube.access import RoleAccess, RoleAccessReader

SANDBOX_CLUSTER_ROLE = "arn:aws:iam::{account}:role/nodecycle-sandbox-cluster"


def point_cluster(
    *,
    account: str,
    region: str,
    name: str,
    endpoint: str,
    ca_pem: str,
    create: bool = True,
    authentication_mode: str = API_AND_CONFIG_MAP,
) -> None:
    """Make `DescribeCluster` return `endpoint` and the base64 of `ca_pem`, creating the cluster if asked
    (in ``authentication_mode``: access entries need ``API`` or ``API_AND_CONFIG_MAP``).

    moto invents an unreachable endpoint and random CA data; product code trusts what DescribeCluster
    says, so the sandbox rewrites moto's cluster object rather than teaching the product anything.
    """
    backend = eks_backends[account][region]
    if name not in backend.clusters:
        if not create:
            raise KeyError(f"no EKS cluster {name} in {account}/{region}")
        backend.create_cluster(
            name=name,
            role_arn=SANDBOX_CLUSTER_ROLE.format(account=account),
            resources_vpc_config={"subnetIds": [], "securityGroupIds": [], "endpointPublicAccess": True},
        )
        configure_access(backend.clusters[name], authentication_mode)
    cluster = backend.clusters[name]
    cluster.endpoint = endpoint
    cluster.certificate_authority = {"data": base64.b64encode(ca_pem.encode()).decode()}


def access_reader(
    *, endpoint_url: str, region: str, cluster: str, access_key: str, secret_key: str
) -> RoleAccessReader:
    """What EKS's authenticator reads of ``cluster`` when a role's token comes: the authentication mode and the
    role's access entry, through the EKS API (the emulation may run in another process than the API server).

    EKS keeps with an entry the role id of the role its ARN named when the entry was made: a role deleted and
    made again under the same ARN (a new role id) is not let in by it ("even if it has the same ARN, the access
    entry won't work": EKS API reference, AccessEntry). Read here as IAM tells it: a role created after its
    entry is not the entry's role. (A role IAM does not know, as some tests name, keeps its entry.)"""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import ClientError

    from nodecycle_sandbox.kube.access import AccessEntry, RoleAccess

    eks = boto3.client(
        "eks",
        endpoint_url=endpoint_url,
        region_name=region,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        config=Config(connect_timeout=2, read_timeout=10, retries={"max_attempts": 2, "mode": "standard"}),
    )

    iam = boto3.client(
        "iam",
        endpoint_url=endpoint_url,
        region_name=region,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        config=Config(connect_timeout=2, read_timeout=10, retries={"max_attempts": 2, "mode": "standard"}),
    )

    def made_again_since(role_arn: str, entry: Mapping[str, Any]) -> bool:
        try:
            role = iam.get_role(RoleName=role_arn.rsplit("/", 1)[-1])["Role"]
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") == "NoSuchEntity":
                return False
            raise
        return bool(role["CreateDate"] > entry["createdAt"])

    def read(role_arn: str) -> RoleAccess:
        described = eks.describe_cluster(name=cluster)["cluster"]
        mode = str((described.get("accessConfig") or {}).get("authenticationMode") or CONFIG_MAP)
        if mode == CONFIG_MAP:  # no entries there (EKS refuses them)
            return RoleAccess(mode, None)
        try:
            entry = eks.describe_access_entry(clusterName=cluster, principalArn=role_arn)["accessEntry"]
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                return RoleAccess(mode, None)
            raise
        if made_again_since(role_arn, entry):
            return RoleAccess(mode, None)
        groups = tuple(str(group) for group in entry.get("kubernetesGroups") or ())
        return RoleAccess(mode, AccessEntry(role_arn, groups, entry.get("username") or None))

    return read
