"""The commands docs/removing.md gives to find and clear what a removed stack left on its nodes, run as written
(the real kubectl, through a shell) against the sandbox's API server: the listing names the nodes of that owner
only, with their lifecycle, and the clearing leaves no nodecycle annotation behind."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from nodecycle_sandbox.kube import KubeServer

ROOT = Path(__file__).resolve().parents[3]
NODES = """apiVersion: v1
kind: Node
metadata:
  name: node-mine
  annotations: {nodecycle.io/owner: gone, nodecycle.io/in-progress: i-0123/terminate/t1, nodecycle.io/released-for: warm-pool}
---
apiVersion: v1
kind: Node
metadata:
  name: node-theirs
  annotations: {nodecycle.io/owner: other, nodecycle.io/in-progress: i-0456/terminate/t2}
"""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[KubeServer, dict[str, str]]]:
    if shutil.which("kubectl") is None:
        pytest.fail("kubectl is required by this test and is not on PATH")
    with KubeServer(tls=True) as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        server.apply(NODES)
        yield server, {**os.environ, "KUBECONFIG": str(kubeconfig), "OWNER": "gone"}


def removing_command(starts: str) -> str:
    (block,) = [
        b
        for b in re.findall(r"```sh\n(.*?)```", (ROOT / "docs/removing.md").read_text(), re.S)
        if starts in b
    ]
    (line,) = [line for line in block.splitlines() if line.startswith(starts)]
    return re.split(r"\s+#", line)[0]


def shell(command: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        ["bash", "-c", command], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_nodes_a_removed_stack_left_are_listed_and_cleared_as_the_docs_say(
    cluster: tuple[KubeServer, dict[str, str]],
) -> None:
    server, env = cluster
    # When the operator lists the nodes the removed stack (owner "gone") left annotated (the listing by owner; the
    # one after it lists every node marked released, whoever's)
    by_owner = "kubectl get nodes -o jsonpath='{range .items[?(@.metadata.annotations.nodecycle\\.io/owner"
    listed = shell(removing_command(by_owner), env)

    # Then only its own node is listed, with its lifecycle
    assert listed == "node-mine\ti-0123/terminate/t1\n"

    # And when it clears that node as the docs say, no nodecycle annotation is left on it, nor was the other touched
    shell(removing_command("kubectl annotate node NODE").replace("NODE", "node-mine"), env)
    core = client.CoreV1Api(server.api_client())

    def annotations(node: str) -> dict[str, str]:
        metadata = core.read_node(node).metadata
        return dict((metadata.annotations if metadata else None) or {})

    assert not [key for key in annotations("node-mine") if key.startswith("nodecycle.io/")]
    assert annotations("node-theirs")["nodecycle.io/owner"] == "other"
