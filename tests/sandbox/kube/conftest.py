"""Fixtures for the sandbox Kubernetes API server: a running server, the official client on it, kubectl."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from nodecycle_sandbox.kube import KubeServer

ZONES = ("eu-west-1a", "eu-west-1b", "eu-west-1c")


@dataclass
class Kube:
    """The official client's API groups, configured the way the product configures it (CA file + bearer).

    Typed ``Any`` on purpose: the client's models declare every field Optional, and these tests assert on
    what the server sent rather than narrowing each attribute for the type checker.
    """

    api_client: Any
    core: Any
    apps: Any
    policy: Any
    coordination: Any


def connect(server: KubeServer, token: str | None = "default") -> Kube:
    """Clients for ``server``; ``token=None`` sends no Authorization header at all."""
    config = client.Configuration(host=server.url)
    if server.url.startswith("https"):
        config.ssl_ca_cert = str(server.ca_file)
    if token is not None:
        config.api_key = {"authorization": server.token() if token == "default" else token}
        config.api_key_prefix = {"authorization": "Bearer"}
    api_client = client.ApiClient(config)
    return Kube(
        api_client,
        client.CoreV1Api(api_client),
        client.AppsV1Api(api_client),
        client.PolicyV1Api(api_client),
        client.CoordinationV1Api(api_client),
    )


def status_of(error: ApiException) -> dict[str, Any]:
    """The ``kind: Status`` body of an API error."""
    assert error.body, f"the {error.status} response has no body"
    body: dict[str, Any] = json.loads(error.body)
    return body


def wait_until[T](predicate: Callable[[], T | None], *, timeout: float = 5.0, what: str = "condition") -> T:
    """Poll until ``predicate`` returns something truthy; fail the test with ``what`` otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def node_name(zone_index: int, host: int) -> str:
    return f"ip-10-0-{zone_index + 1}-{host}.eu-west-1.compute.internal"


def nodes_seed(count: int, *, pods_capacity: int = 110) -> list[dict[str, Any]]:
    """``count`` nodes spread round-robin over the three zones, as seed entries."""
    return [
        {
            "name": node_name(i % 3, 10 + i // 3),
            "instanceId": f"i-0{i:016x}",
            "zone": ZONES[i % 3],
            "podsCapacity": pods_capacity,
        }
        for i in range(count)
    ]


def pods_of(server: KubeServer, namespace: str, app: str) -> list[dict[str, Any]]:
    return [p for p in server.objects("pods", namespace) if p["metadata"].get("labels", {}).get("app") == app]


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


@pytest.fixture
def server() -> Iterator[KubeServer]:
    """A started HTTPS server with an empty cluster (built-in namespaces only); fast pods."""
    with KubeServer(tick_seconds=0.02, pod_start_seconds=0.05) as started:
        yield started


@pytest.fixture
def kube(server: KubeServer) -> Iterator[Kube]:
    clients = connect(server)
    yield clients
    clients.api_client.close()


@pytest.fixture
def kubectl(server: KubeServer, tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run the real kubectl against ``server`` (its own kubeconfig, HOME and discovery cache); ``config=``
    swaps in another kubeconfig."""
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.fail("kubectl is required by these tests and is not on PATH")
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)}

    def run(
        *args: str, check: bool = True, timeout: float = 60, config: Path = kubeconfig
    ) -> subprocess.CompletedProcess[str]:
        command = [binary, "--cache-dir", str(tmp_path / "kube-cache"), *args]
        result = subprocess.run(
            command,
            env=env | {"KUBECONFIG": str(config)},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            pytest.fail(f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result

    return run
