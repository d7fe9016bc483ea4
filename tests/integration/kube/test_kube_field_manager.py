"""What nodecycle writes in a cluster is named as its own: the API server records the manager of every write
(``metadata.managedFields``, from the request's User-Agent when it names no ``fieldManager``), which is what an
operator sees in ``kubectl get node --show-managed-fields`` and in the audit log. With the client's default
User-Agent, a cordon by nodecycle read as written by "OpenAPI-Generator", like any tool built on that client."""

from __future__ import annotations

from kubernetes.client import CoreV1Api

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.adapters.kube.eks_access import EksCluster
from nodecycle.domain.ports.cluster import Claim
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import drain_server, eks_describing

NODE = "ip-10-0-1-10.eu-west-1.compute.internal"
SEED = {"nodes": [{"privateIp": "10.0.1.10", "instanceId": "i-0a1b2c3d4e5f60101", "zone": "eu-west-1a"}]}


def managers(server: KubeServer) -> set[str]:
    stored = server.get_object("nodes", NODE)
    assert stored is not None
    return {entry["manager"] for entry in stored["metadata"].get("managedFields") or []}


def test_a_cordon_by_nodecycle_is_recorded_as_written_by_nodecycle() -> None:
    with drain_server(SEED) as server, eks_describing(server):
        eks = EksCluster("sandbox")
        cluster = KubeCluster(eks.api_client)
        node = cluster.get_node(NODE)
        assert node is not None

        # When nodecycle claims (cordons and annotates) the node
        claim = cluster.claim_node(
            node, owner="stack-a", in_progress='{"token":"t"}', cordon=True, exclude_from_lb=False
        )

        # Then the API server records that write's fields as nodecycle's, and no generic client's
        assert claim is Claim.CLAIMED
        assert "nodecycle" in managers(server)
        assert "OpenAPI-Generator" not in managers(server)
        # (the same User-Agent on every call of that client, whichever API it goes through)
        api_client = eks.api_client()
        assert api_client.user_agent.startswith("nodecycle/")
        assert CoreV1Api(api_client).api_client.user_agent == api_client.user_agent


def test_the_user_agents_version_is_the_projects() -> None:
    import tomllib
    from pathlib import Path

    import nodecycle

    project = tomllib.loads((Path(__file__).resolve().parents[3] / "pyproject.toml").read_text())["project"]
    assert nodecycle.__version__ == project["version"]
