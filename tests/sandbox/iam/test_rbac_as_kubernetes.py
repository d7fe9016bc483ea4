"""The sandbox API server's RBAC as strict as Kubernetes's where nodecycle's grants are narrow (not defects: each
holds; the guard, none before): a ``list`` does not grant ``watch``; ``pods/eviction`` is a subresource of its
own, which grants neither ``create`` nor ``delete`` of pods; ``resourceNames`` names what may be read and replaced,
never a ``list`` nor a ``patch``; a Role grants in its own namespace only."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.kube.access import AccessEntry

ROOT = Path(__file__).resolve().parents[3]
ACCOUNT = "123456789012"
KEYS = {"drain": "AKIARBACDRAINFUNC000", "sweeper": "AKIARBACSWEEPERFUNC0"}


@pytest.fixture(scope="module")
def server() -> Iterator[KubeServer]:
    with KubeServer(tick_seconds=0.02, pod_start_seconds=0.05) as started:
        started.apply(ROOT / "deploy" / "rbac.yaml")
        for function, key in KEYS.items():
            role = f"arn:aws:iam::{ACCOUNT}:role/nodecycle-{function.capitalize()}FunctionRole"
            started.add_access_entries([AccessEntry(role, (f"nodecycle-{function}",))])
            started.map_role(key, role, f"nodecycle-{function.capitalize()}Function")
        started.seed(
            {"namespaces": ["shop"], "deployments": [{"name": "web", "namespace": "shop", "replicas": 1}]}
        )
        started.settle()
        yield started


def core(server: KubeServer, function: str) -> client.CoreV1Api:
    return client.CoreV1Api(server.api_client(KEYS[function]))


def status(call: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    try:
        call(*args, **kwargs)
    except ApiException as refused:
        return int(refused.status)
    return 200


def test_a_list_granted_does_not_grant_a_watch(server: KubeServer) -> None:
    sweeper = core(server, "sweeper")
    assert status(sweeper.list_node) == 200
    # (403, the authorizer's: not the 405 the sandbox answers any watch it was allowed)
    assert status(sweeper.list_node, watch=True, _preload_content=False, timeout_seconds=1) == 403


def test_evictions_grant_neither_the_creation_nor_the_deletion_of_pods_to_the_sweeper(
    server: KubeServer,
) -> None:
    listed = core(server, "drain").list_pod_for_all_namespaces().items
    ((name, namespace),) = [
        (str(p.metadata.name), str(p.metadata.namespace))
        for p in listed
        if p.metadata and p.metadata.namespace == "shop"
    ]
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
    sweeper = core(server, "sweeper")
    assert status(sweeper.create_namespaced_pod_eviction, name, namespace, eviction) == 403
    assert status(sweeper.delete_namespaced_pod, name, namespace) == 403
    body = client.V1Pod(metadata=client.V1ObjectMeta(name="x"), spec=client.V1PodSpec(containers=[]))
    assert status(core(server, "drain").create_namespaced_pod, namespace, body) == 403


def test_the_budget_config_map_is_read_and_replaced_by_name_never_listed(server: KubeServer) -> None:
    drain = core(server, "drain")
    assert status(drain.read_namespaced_config_map, "nodecycle-budget", "nodecycle") == 200
    assert status(drain.list_namespaced_config_map, "nodecycle") == 403
    assert status(drain.read_namespaced_config_map, "kube-root-ca.crt", "nodecycle") == 403
    assert status(drain.read_namespaced_config_map, "nodecycle-budget", "shop") == 403
    patch = {"data": {"x": json.dumps(1)}}
    assert status(drain.patch_namespaced_config_map, "nodecycle-budget", "nodecycle", patch) == 403
