"""Who a function is in the cluster is what EKS says of its role now, not what the template said at deploy: an
access entry deleted or changed through the EKS API (by hand, by another stack's deletion) takes the role's
access with it, as EKS's authenticator does within seconds, and a cluster in API mode does not read
kube-system/aws-auth at all. The sandbox's API server reads the entries and the mode from the EKS emulation at
authentication (``Sandbox._grant_cluster_access``, ``kube/access.py``), believing what it read for
``AUTHENTICATOR_LAG`` seconds as EKS's authenticator lags; it mapped a role by the entries the stack was
deployed with and read aws-auth whatever the mode, so a function whose entry was gone kept its groups."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from nodecycle_sandbox import Sandbox, SandboxOptions
from nodecycle_sandbox.kube.access import AUTHENTICATOR_LAG

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


def status_after_the_lag(sandbox: Sandbox, function: str, wanted: int) -> int:
    """The function's status once EKS's authenticator has seen a change: ``wanted`` within its lag (asked
    again until then, with a margin so that a loaded machine does not turn the lag into a failure)."""
    deadline = time.monotonic() + AUTHENTICATOR_LAG + 10
    status = status_of(sandbox, function)
    while status != wanted and time.monotonic() < deadline:
        time.sleep(0.25)
        status = status_of(sandbox, function)
    return status


@pytest.mark.slow
def test_a_role_whose_access_entry_is_deleted_is_not_known_to_the_cluster(sandbox: Sandbox) -> None:
    eks = sandbox.client("eks")
    role = f"arn:aws:iam::{ACCOUNT}:role/nodecycle-DrainFunctionRole"
    assert status_of(sandbox, "DrainFunction") == 200

    # When its access entry is deleted through EKS, Then the drain function's calls are answered 401
    entry = eks.describe_access_entry(clusterName="sandbox", principalArn=role)["accessEntry"]
    eks.delete_access_entry(clusterName="sandbox", principalArn=role)
    try:
        deleted = status_after_the_lag(sandbox, "DrainFunction", 401)
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
    # And the entry made again gives the role its groups back, once the authenticator sees it
    restored = status_after_the_lag(sandbox, "DrainFunction", 200)
    assert (deleted, mapped_in_api_mode, restored) == (401, 401, 200)
