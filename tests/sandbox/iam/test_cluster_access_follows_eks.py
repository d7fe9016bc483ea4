"""Who a function is in the cluster is what EKS says of its role now, not what the template said at deploy: an
access entry deleted or changed through the EKS API (by hand, by another stack's deletion) takes the role's
access with it, as EKS's authenticator does within seconds, and a cluster in API mode does not read
kube-system/aws-auth at all. The sandbox's API server maps a role by the entries the runner handed it when the
stack was deployed (``Sandbox._grant_cluster_access``), and reads aws-auth whatever the cluster's mode: a function
whose entry is gone kept its groups, so no run could meet the 401 that EKS answers it (the drain's handling of
it, tests/integration/budget/test_role_unknown_to_the_cluster.py, is on a role the server was told to forget).

The fix belongs to the API server (``nodecycle_sandbox/kube/access.py``: a source of access entries and of the
authentication mode to read at each authentication, or a removal the sandbox calls; ``Sandbox._grant_cluster_access``
passes one that reads the EKS emulation's entries, ``eks_access._entries``), hence the strict xfail."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from nodecycle_sandbox import Sandbox, SandboxOptions

ROOT = Path(__file__).resolve().parents[3]
ACCOUNT = "123456789012"


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    # A cluster in API mode (access entries only), the stack deployed with its entries, no group
    options = SandboxOptions(
        root=ROOT, group=None, authentication_mode="API", mode="inline", parameters={"ManagedGroups": "nodes"}
    )
    with Sandbox(options) as started:
        yield started


def status_of(sandbox: Sandbox, function: str) -> int:
    """The API server's answer to the function's list of nodes: 200, or the status it refused it with."""
    nodes = client.CoreV1Api(sandbox.kube.api_client(sandbox.runner.access_key(function)))
    try:
        nodes.list_node()
    except ApiException as refused:
        return int(refused.status)
    return 200


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason="the sandbox's API server maps roles by the entries the stack was deployed with (kube/access.py): "
    "an entry deleted through EKS keeps its groups, and aws-auth is read in API mode",
)
def test_a_role_whose_access_entry_is_deleted_is_not_known_to_the_cluster(sandbox: Sandbox) -> None:
    eks = sandbox.client("eks")
    role = f"arn:aws:iam::{ACCOUNT}:role/nodecycle-DrainFunctionRole"
    assert status_of(sandbox, "DrainFunction") == 200

    # When its access entry is deleted through EKS, Then the drain function's calls are answered 401
    entry = eks.describe_access_entry(clusterName="sandbox", principalArn=role)["accessEntry"]
    eks.delete_access_entry(clusterName="sandbox", principalArn=role)
    try:
        deleted = status_of(sandbox, "DrainFunction")
        # And an aws-auth mapping of the role does not stand in for it on a cluster in API mode
        mapping = [{"rolearn": role, "username": "drain", "groups": ["nodecycle-drain"]}]
        client.CoreV1Api(sandbox.kube.api_client()).create_namespaced_config_map(
            "kube-system",
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name="aws-auth"), data={"mapRoles": json.dumps(mapping)}
            ),
        )
        mapped_in_api_mode = status_of(sandbox, "DrainFunction")
    finally:
        eks.create_access_entry(
            clusterName="sandbox", principalArn=role, kubernetesGroups=entry["kubernetesGroups"]
        )
    assert (deleted, mapped_in_api_mode) == (401, 401)
