"""``nodecycle doctor`` on a cluster where aws-node-termination-handler runs in IMDS mode: a DaemonSet (its Helm
chart's, in kube-system, named aws-node-termination-handler, or ``<release>-aws-node-termination-handler``, and
labelled app.kubernetes.io/name=aws-node-termination-handler) whose pod on each node drains that node when the
instance metadata tells of a Spot interruption (ENABLE_SPOT_INTERRUPTION_DRAINING, on by default) or a scheduled
event (ENABLE_SCHEDULED_EVENT_DRAINING, on by default in its current releases), with no tag to check, no hook and no
budget. nodecycle drains the same nodes on the same events (EventBridge) and on terminations: two drainers act on
one node. The doctor saw the queue mode's group tag only (test_cli_doctor_other_drainers); this mode has none.
Run on the sandbox's Kubernetes API server, its DaemonSet controller placing the handler's pods."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodecycle_cli import cluster
from nodecycle_cli.doctor import drainers
from nodecycle_cli.doctor.findings import Status
from nodecycle_cli.main import main
from nodecycle_sandbox.kube import KubeServer
from tests.functions.test_doctor_kubeconfig import REGION, other_cluster  # noqa: F401 (the fixture)

MANAGED, OTHER = "i-0aaaaaaaaaaaaaaa1", "i-0bbbbbbbbbbbbbbb2"


def handler(name: str = "aws-node-termination-handler", **env: str) -> str:
    """The DaemonSet as the Helm chart renders it in IMDS mode (its env as given)."""
    variables = {"ENABLE_SQS_TERMINATION_DRAINING": "false", **env}
    listed = "".join(
        f"\n            - name: {key}\n              value: {json.dumps(value)}"
        for key, value in variables.items()
    )
    return f"""
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {name}
  namespace: kube-system
  labels: {{app.kubernetes.io/name: aws-node-termination-handler, app.kubernetes.io/instance: nth}}
spec:
  selector:
    matchLabels: {{app.kubernetes.io/name: aws-node-termination-handler, app.kubernetes.io/instance: nth}}
  template:
    metadata:
      labels: {{app.kubernetes.io/name: aws-node-termination-handler, app.kubernetes.io/instance: nth}}
    spec:
      containers:
        - name: aws-node-termination-handler
          image: public.ecr.aws/aws-ec2/aws-node-termination-handler:v1.22.0
          env:{listed}
"""


@pytest.fixture
def server() -> Iterator[KubeServer]:
    """A cluster of two nodes: one of the stack's groups' instances, one of another group's."""
    with KubeServer(tls=True) as started:
        started.add_node("ip-10-0-1-1.eu-west-1.compute.internal", instance_id=MANAGED, zone="eu-west-1a")
        started.add_node("ip-10-0-2-2.eu-west-1.compute.internal", instance_id=OTHER, zone="eu-west-1b")
        yield started


def findings(server: KubeServer, tmp_path: Path, managed: set[str] | None = None) -> list[drainers.Finding]:
    server.settle()
    kubeconfig = str(server.write_kubeconfig(tmp_path / "kubeconfig"))
    api = cluster.api_client(argparse.Namespace(kubeconfig=kubeconfig, context=None))
    return drainers.termination_handlers(api, {MANAGED} if managed is None else managed)


def test_the_charts_imds_daemonset_on_a_managed_node_is_a_problem_saying_what_it_conflicts_with(
    server: KubeServer, tmp_path: Path
) -> None:
    # Given the chart's DaemonSet as its defaults render it (Spot interruption and scheduled event draining on)
    server.apply(handler(ENABLE_SPOT_INTERRUPTION_DRAINING="true", ENABLE_SCHEDULED_EVENT_DRAINING="true"))

    # When the doctor looks for other drainers
    (found,) = findings(server, tmp_path)

    # Then one problem names it, where it runs among the stack's nodes, what it drains on, what that conflicts
    # with, and what to do
    assert found.status is Status.PROBLEM
    assert found.check == "cluster.other-drainers"
    assert "kube-system/aws-node-termination-handler" in found.what
    assert "IMDS mode" in found.what
    assert "Spot interruptions" in found.what
    assert "scheduled events" in found.what
    assert "ip-10-0-1-1.eu-west-1.compute.internal" in found.what
    assert "ip-10-0-2-2" not in found.what  # (not one of the stack's)
    assert "two drainers" in found.why
    assert "budget" in found.why
    assert "docs/migrating.md" in found.fix
    assert "kubectl -n kube-system delete daemonset aws-node-termination-handler" in found.fix


def test_a_release_of_another_name_is_found_by_its_label_and_its_defaults_count(
    server: KubeServer, tmp_path: Path
) -> None:
    # Given the chart installed as release nth (its DaemonSet named after it), Spot draining turned off and
    # scheduled event draining left to the handler's default (on)
    server.apply(handler("nth-aws-node-termination-handler", ENABLE_SPOT_INTERRUPTION_DRAINING="false"))

    # When the doctor looks, Then it is a problem for the scheduled events alone
    (found,) = findings(server, tmp_path)
    assert found.status is Status.PROBLEM
    assert "kube-system/nth-aws-node-termination-handler" in found.what
    assert "scheduled events" in found.what
    assert "Spot interruptions" not in found.what


@pytest.mark.parametrize(
    "env",
    [
        {"ENABLE_SPOT_INTERRUPTION_DRAINING": "false", "ENABLE_SCHEDULED_EVENT_DRAINING": "False"},
        {"DRY_RUN": "true"},
    ],
    ids=["draining-off", "dry-run"],
)
def test_a_handler_that_drains_nothing_is_ok_and_named(
    server: KubeServer, tmp_path: Path, env: dict[str, str]
) -> None:
    server.apply(handler(**env))
    (found,) = findings(server, tmp_path)
    assert found.status is Status.OK
    assert "kube-system/aws-node-termination-handler" in found.what
    assert "drains nothing" in found.what


def test_a_handler_kept_off_the_stacks_nodes_is_ok(server: KubeServer, tmp_path: Path) -> None:
    # Given the handler draining, on the other group's node only (as docs/migrating.md has it kept off the
    # stack's): here, the stack's groups hold no instance of the cluster's nodes
    server.apply(handler())

    # When the doctor looks, Then it says where it runs, and that none of it is the stack's
    (found,) = findings(server, tmp_path, managed={"i-0ccccccccccccccc3"})
    assert found.status is Status.OK
    assert "none of the stack's groups" in found.what


def test_no_handler_and_a_lookalike_are_ok(server: KubeServer, tmp_path: Path) -> None:
    # Given a DaemonSet that is not the handler
    server.apply(
        handler("node-exporter")
        .replace("aws-node-termination-handler:v1.22.0", "quay.io/prometheus/node-exporter:v1.8.0")
        .replace(
            "app.kubernetes.io/name: aws-node-termination-handler", "app.kubernetes.io/name: node-exporter"
        )
        .replace("- name: aws-node-termination-handler", "- name: node-exporter")
    )

    # When the doctor looks, Then nothing is found
    (found,) = findings(server, tmp_path)
    assert found.status is Status.OK
    assert "no aws-node-termination-handler" in found.what


def test_the_doctor_makes_the_check_on_the_cluster(
    other_cluster: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    # When the operator checks a cluster (here through another cluster's kubeconfig: the check is not made there)
    main(["doctor", "--cluster", "prod", "--region", REGION, "--kubeconfig", str(other_cluster), "--json"])

    # Then the other drainers are among the cluster's checks
    statuses = {f["check"]: f["status"] for f in json.loads(capsys.readouterr().out)["findings"]}
    assert statuses["cluster.other-drainers"] == "unchecked"
