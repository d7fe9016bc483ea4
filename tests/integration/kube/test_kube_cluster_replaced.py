"""A cluster deleted and created again under its name (a blue/green replacement, a rebuild after an incident) has
another endpoint and another CA: ``eks:DescribeCluster`` says so, and the old endpoint no longer answers. A warm
container described the cluster once, when it started, and a function called every minute (the sweeper) or
often (the drain) keeps its container for hours: it must describe the cluster again when its endpoint fails,
not fail every drain until Lambda happens to recycle it (each lifecycle then ends by its hook's timeout, with its
default result, undrained)."""

from __future__ import annotations

import boto3
import pytest
from moto import mock_aws

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.adapters.kube.eks_access import EksCluster
from nodecycle.domain.errors import TransientError
from nodecycle_sandbox.aws.eks import point_cluster
from tests.integration.kube.cluster import ACCOUNT, drain_server
from tests.integration.kube.test_kube_adapter import NODE_A, SEED


def describe_as(server: object) -> None:
    point_cluster(
        account=ACCOUNT,
        region="eu-west-1",
        name="sandbox",
        endpoint=server.url,  # type: ignore[attr-defined]
        ca_pem=server.ca_pem.decode(),  # type: ignore[attr-defined]
    )


def test_a_container_describes_the_cluster_again_once_its_endpoint_fails() -> None:
    with drain_server(SEED) as new, mock_aws():
        with drain_server(SEED) as old:
            # Given a warm container that described the cluster and used it
            describe_as(old)
            cluster = KubeCluster(EksCluster("sandbox").api_client)
            assert cluster.get_node(NODE_A) is not None
            # When the cluster is replaced under its name: another endpoint, another CA, the old one gone
            describe_as(new)
        # Then the call to the old endpoint fails (a transient error the step retries) ...
        with pytest.raises(TransientError):
            cluster.get_node(NODE_A)
        # ... and the next one is made to the endpoint EKS describes now
        assert cluster.get_node(NODE_A) is not None


def test_an_endpoint_down_for_a_while_costs_one_description_a_minute_not_one_per_call() -> None:
    with drain_server(SEED) as server, mock_aws():
        describe_as(server)
        eks = boto3.client("eks", region_name="eu-west-1")
        described: list[str] = []
        eks.meta.events.register("before-call.eks.DescribeCluster", lambda **_: described.append("d"))
        cluster = KubeCluster(EksCluster("sandbox", eks=eks).api_client)
        assert cluster.get_node(NODE_A) is not None
        # When the API server stops answering (the same cluster: EKS describes what it described)
        server.stop()
        for _ in range(3):
            with pytest.raises(TransientError):
                cluster.get_node(NODE_A)
        # Then the three failed calls described the cluster once, after the one it was connected with
        assert len(described) == 2
