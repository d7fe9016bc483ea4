"""The EKS cluster of the sandbox: moto's cluster object, pointed at the local Kubernetes API server."""

from __future__ import annotations

import base64

from moto.eks.models import eks_backends

from nodecycle_sandbox.aws.eks_access import API_AND_CONFIG_MAP, configure_access

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
