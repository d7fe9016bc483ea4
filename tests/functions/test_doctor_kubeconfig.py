"""``nodecycle doctor`` with a kubeconfig whose context is another cluster than the one it checks (the
operator's last ``aws eks update-kubeconfig`` was for another cluster): the kubeconfig finding says so, and the
cluster's objects (the budget, the RBAC, the permissions) are not vouched for from the other cluster's. Read
there, they were "ok" findings about a cluster the doctor was not asked about."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from nodecycle_cli import rbac
from nodecycle_cli.main import main
from nodecycle_sandbox.kube import KubeServer

REGION = "eu-west-1"


@pytest.fixture
def other_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """EKS cluster prod (moto), and the kubeconfig of another cluster, where nodecycle is installed as it should."""
    monkeypatch.delenv("NODECYCLE_STACK", raising=False)
    with KubeServer(tls=True) as server, mock_aws():
        server.apply(rbac.render())
        boto3.client("eks", region_name=REGION).create_cluster(
            name="prod",
            roleArn="arn:aws:iam::123456789012:role/eks",
            resourcesVpcConfig={"subnetIds": ["subnet-1"]},
        )
        yield server.write_kubeconfig(tmp_path / "kubeconfig")


def test_the_cluster_objects_of_another_clusters_kubeconfig_are_not_found_ok(
    other_cluster: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # When the operator checks cluster prod with the other cluster's kubeconfig
    main(["doctor", "--cluster", "prod", "--region", REGION, "--kubeconfig", str(other_cluster), "--json"])
    findings = json.loads(capsys.readouterr().out)["findings"]

    # Then the kubeconfig is a problem, and nothing of what was read there is said to be right about prod
    statuses = {f["check"]: f["status"] for f in findings}
    assert statuses["cluster.kubeconfig"] == "problem"
    read_there = {c: s for c, s in statuses.items() if c in ("cluster.budget", "cluster.rbac-applied")}
    assert read_there, statuses
    assert "ok" not in read_there.values(), findings
