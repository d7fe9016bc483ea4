"""A kubeconfig whose cluster cannot be reached (a private endpoint from outside its VPC, a cluster deleted, a
tunnel down): the command says so in one line on stderr, as every failure it explains, and with --json the error
object on stdout. The Kubernetes client's connection pool logged each of its retries first ("Retrying
(Retry(total=0, ...)) after connection broken by 'NewConnectionError(...)'"), a line of urllib3's own before
the command's, in a real shell (the tests' captured logging hid it): run here as an operator runs it, in a
process of its own."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: far
  cluster: {{server: "https://127.0.0.1:{port}", insecure-skip-tls-verify: true}}
users:
- name: someone
  user: {{token: "t"}}
contexts:
- name: far
  context: {{cluster: far, user: someone}}
current-context: far
"""


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # nothing listens there once the probe is closed


def run(tmp_path: Path, *words: str) -> subprocess.CompletedProcess[str]:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG.format(port=closed_port()))
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AWS_", "NODECYCLE_", "KUBECONFIG"))
    }
    env["KUBECONFIG"] = str(kubeconfig)
    return subprocess.run(
        [sys.executable, "-m", "nodecycle_cli", *words],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_an_unreachable_cluster_is_one_line(tmp_path: Path) -> None:
    done = run(tmp_path, "budget", "show")

    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("nodecycle budget: cannot reach the Kubernetes API")


def test_an_unreachable_cluster_with_json_is_an_error_object(tmp_path: Path) -> None:
    done = run(tmp_path, "budget", "show", "--json")

    assert done.returncode == 2
    error = json.loads(done.stdout)["error"]
    assert error["exit_status"] == 2
    assert error["message"].startswith("cannot reach the Kubernetes API")
    assert done.stderr.count("\n") == 1, done.stderr
