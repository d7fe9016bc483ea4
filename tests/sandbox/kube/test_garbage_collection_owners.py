"""The garbage collector and owner references it cannot resolve: a dependent whose owners are all gone is deleted,
but an owner of a kind the API server does not serve (a custom resource whose CRD is not installed, an operator's
own controller naming itself) cannot be looked up, so kube-controller-manager's garbage collector keeps its
dependent and retries (kubernetes/kubernetes#98040): the sandbox must not delete what a cluster keeps."""

from __future__ import annotations

from typing import Any

from nodecycle_sandbox.kube import KubeServer

from .conftest import node_name, nodes_seed


def _pod(name: str, api_version: str, kind: str) -> dict[str, Any]:
    owner = {
        "apiVersion": api_version,
        "kind": kind,
        "name": "owner",
        "uid": "4b7c2f0e-0000-4000-8000-00000000000f",  # no object has it
        "controller": True,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop", "ownerReferences": [owner]},
        "spec": {"nodeName": node_name(0, 10), "containers": [{"name": "c", "image": "example.com/c:1"}]},
    }


def test_a_dependent_of_an_owner_kind_the_server_does_not_serve_is_kept_and_one_of_a_gone_owner_is_deleted() -> (
    None
):
    with KubeServer(tick_seconds=0.02, pod_start_seconds=0.05) as server:
        # Given two pods whose owner uid no object has: one owned by a kind the server serves (a ReplicaSet), one
        # by a kind it does not (an operator's NodeAgent, no CRD)
        server.seed(
            {
                "nodes": nodes_seed(1),
                "namespaces": ["shop"],
                "objects": [
                    _pod("of-a-replicaset", "apps/v1", "ReplicaSet"),
                    _pod("of-a-node-agent", "agents.example.com/v1", "NodeAgent"),
                ],
            }
        )

        # When the controllers have run
        server.settle()

        # Then the ReplicaSet's pod is collected (its owner is gone) and the NodeAgent's stays, running
        assert server.get_object("pods", "of-a-replicaset", "shop") is None
        kept = server.get_object("pods", "of-a-node-agent", "shop")
        assert kept is not None
        assert not kept["metadata"].get("deletionTimestamp")
        assert kept["status"].get("phase") == "Running"
