"""A function the cluster answers 401 (its role's access entry gone, or its token signed for another cluster than
the API server's: a stack whose ClusterName is not the cluster's) is refused, and the refusal is all an operator
reads of it (the drain's event, its log line). It says "Unauthorized" only: neither the cluster the function
signed for nor what a 401 from EKS means, where a 403 names the user and the verb. A 401 that outlasts the client's
retry with a fresh token (``eks_access._RenewingApiClient``) is now a ``ClusterUnauthorized`` naming the cluster,
the function's role and what to look at. On the real adapter against the sandbox API server."""

from __future__ import annotations

import pickle
from collections.abc import Iterator

import pytest

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.adapters.kube.errors import status_message
from nodecycle.domain.ports.cluster import Refused
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import DRAIN_ROLE
from tests.integration.kube.cluster import drain_cluster, drain_server
from tests.integration.kube.test_kube_drain_steps import NODE, SEED


@pytest.fixture
def server() -> Iterator[KubeServer]:
    with drain_server(SEED) as kube:
        yield kube


@pytest.fixture
def cluster(server: KubeServer) -> Iterator[KubeCluster]:
    with drain_cluster(server) as adapter:
        yield adapter


def test_a_refusal_of_an_unknown_role_names_the_cluster_it_signed_for(
    cluster: KubeCluster, server: KubeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the drain function's key a session of a role the cluster has no access entry for
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "nodecycle-DrainFunction-1A2B")
    server.map_role("FOOBARKEY", DRAIN_ROLE.replace("DrainFunction", "Recreated"), "nodecycle-DrainFunction")

    with pytest.raises(Refused) as refused:
        cluster.get_node(NODE)

    # Then the refusal names the cluster, as the operator must look there (its access entries, the stack's name of it)
    assert "EKS cluster sandbox" in str(refused.value), str(refused.value)
    # ...whose access entries must map the function's role (the 401 itself names no one)
    assert "nodecycle-DrainFunction-1A2B" in str(refused.value), str(refused.value)
    assert "access entry" in str(refused.value), str(refused.value)
    # (and the API server's answer, pickled as an invocation's error may be, says it still)
    answer = refused.value.__cause__
    assert answer is not None
    assert status_message(pickle.loads(pickle.dumps(answer))) == str(refused.value)
