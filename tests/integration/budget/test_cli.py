"""``nodecycle budget show`` and ``nodecycle budget release`` against the sandbox through a kubeconfig."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from nodecycle.adapters.kube.budget import ConfigMapBudgetStore, KubeNodeInventory
from nodecycle.domain.budget import BudgetLimits, DisruptionBudget, SlotRequest
from nodecycle.domain.policy import Quantity
from nodecycle_cli import budget as budget_cli
from nodecycle_cli.deployment import from_description
from nodecycle_cli.main import main
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import (
    NAMESPACE,
    add_nodes,
    admin_api,
    core_api,
    instance_of,
    node_name,
    zone_of,
)
from tests.integration.budget.drains import Drain, SharedMetrics, WallClock


def run(kubeconfig: Path, *argv: str) -> int:
    """The budget command through a parser of its own, as ``nodecycle`` registers it."""
    parser = argparse.ArgumentParser(prog="nodecycle")
    budget_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["budget", *argv, "--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE])
    return int(args.run(args))


@contextmanager
def stack_of_cluster_prod(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Stack blue-nodes (owner blue: its stack name, as each account that deploys it so names it) of EKS cluster
    prod, as the CLI finds it, on moto's AWS."""
    with mock_aws():
        aws = boto3.Session(region_name="eu-west-1")
        aws.client("eks").create_cluster(
            name="prod",
            roleArn="arn:aws:iam::123456789012:role/eks",
            resourcesVpcConfig={"subnetIds": ["subnet-1"]},
        )
        described = {
            "StackName": "blue-nodes",
            "Parameters": [{"ParameterKey": "ClusterName", "ParameterValue": "prod"}],
            "Outputs": [{"OutputKey": "OwnerId", "OutputValue": "blue"}],
        }
        monkeypatch.setattr(budget_cli, "session", lambda args: aws)
        monkeypatch.setattr(budget_cli, "find", lambda aws, name: from_description(described, "eu-west-1"))
        yield


@pytest.fixture
def kubeconfig(server: KubeServer, tmp_path: Path) -> Path:
    return server.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def blue(server: KubeServer) -> Iterator[DisruptionBudget]:
    """Owner blue with limits 2 / 1 per zone, holding 2 nodes, with 2 more waiting."""
    add_nodes(server, 6)
    api = core_api(server)
    budget = DisruptionBudget(
        store=ConfigMapBudgetStore(lambda: api, NAMESPACE),
        nodes=KubeNodeInventory(lambda: api),
        clock=WallClock(),
        metrics=SharedMetrics(),
        limits=BudgetLimits(Quantity.parse("2"), Quantity.parse("50%")),
        holder_ttl=timedelta(seconds=300),
        count_unavailable=False,
        owner="blue",
    )
    for i in (0, 1, 3, 2):  # zones a, b, a (waits: zone a full), c (waits: 2 in all)
        budget.acquire(
            SlotRequest(node_name(i), instance_of(i), zone_of(i), owner="blue", record_id=f"rec-{i}")
        )
    yield budget
    api.api_client.close()


def test_show_prints_limits_zones_holders_and_waiters(
    blue: DisruptionBudget, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(kubeconfig, "show") == 0

    out = capsys.readouterr().out
    assert f"Disruption budget {NAMESPACE}/nodecycle-budget (format 3)" in out
    assert "HOLDERS (2)" in out
    assert "WAITERS (2)" in out
    limits = out.split("LIMITS\n")[1].splitlines()[1].split()
    assert limits[:4] == ["blue", "2", "50%", "6"]
    zone_a = next(line for line in out.splitlines() if line.startswith("eu-west-1a"))
    assert zone_a.split() == ["eu-west-1a", "1", "1", "blue:", "1"]
    holder = next(line for line in out.splitlines() if line.startswith(node_name(0)))
    assert holder.split()[1:4] == [instance_of(0), "eu-west-1a", "blue"]
    assert re.search(r"in (4m5\d|5m00)s$", holder), holder


def test_show_as_json_is_the_budget_view(
    blue: DisruptionBudget, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(kubeconfig, "show", "--output", "json") == 0

    view = json.loads(capsys.readouterr().out)
    assert [h["node"] for h in view["holders"]] == [node_name(0), node_name(1)]
    assert [(w["position"], w["node"]) for w in view["waiters"]] == [(1, node_name(3)), (2, node_name(2))]
    assert view["limits"][0]["per_zone"] == {"eu-west-1a": 1, "eu-west-1b": 1, "eu-west-1c": 1}


def test_show_of_the_shipped_budget_is_an_empty_one(
    server: KubeServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(kubeconfig, "show", "--output", "json") == 0
    view = json.loads(capsys.readouterr().out)
    assert (view["holders"], view["waiters"]) == ([], [])


def test_show_without_a_budget_says_how_to_install_it(
    server: KubeServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    admin_api(server).delete_namespaced_config_map("nodecycle-budget", NAMESPACE)
    assert run(kubeconfig, "show") == 1
    assert "nodecycle rbac --namespace nodecycle | kubectl apply -f -" in capsys.readouterr().out


def test_release_asks_then_frees_the_slot_whatever_owner_holds_it(
    blue: DisruptionBudget,
    kubeconfig: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given an operator who confirms
    questions: list[str] = []

    def confirm(prompt: str) -> str:
        questions.append(prompt)
        return "y"

    monkeypatch.setattr("builtins.input", confirm)

    # When they release the slot of a node blue holds
    assert run(kubeconfig, "release", node_name(0)) == 0

    # Then they were asked about that node and its owner (whose drain, which took it just now, is running), and the
    # slot is free for the first waiter
    (question,) = questions
    assert question.startswith(
        f"Release the budget slot of {node_name(0)} held by blue (its drain renewed it "
    )
    assert question.endswith(
        "running, not stuck; freed, the slot goes to a waiting node whose drain starts beside "
        "it, past the limits)? [y/N] "
    )
    assert f"Released the budget slot of {node_name(0)}: owner blue, instance {instance_of(0)}" in (
        capsys.readouterr().out
    )
    assert [v.node for v in blue.snapshot().holders] == [node_name(1)]
    assert blue.acquire(SlotRequest(node_name(3), instance_of(3), zone_of(3), "blue", "rec-3")).granted


def test_release_does_nothing_unless_confirmed(
    blue: DisruptionBudget, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("builtins.input", lambda prompt: "")

    assert run(kubeconfig, "release", node_name(0)) == 1
    assert len(blue.snapshot().holders) == 2


def test_release_with_yes_does_not_ask(
    blue: DisruptionBudget, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("builtins.input", lambda prompt: pytest.fail("asked"))

    assert run(kubeconfig, "release", node_name(1), "--yes") == 0
    assert [v.node for v in blue.snapshot().holders] == [node_name(0)]


def test_release_of_a_node_that_only_waits_says_so(
    blue: DisruptionBudget, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(kubeconfig, "release", node_name(3), "--yes") == 1
    assert "holds no budget slot (it is waiting, for owner blue)" in capsys.readouterr().out


def test_show_lists_the_nodes_an_owner_counts_as_unavailable_for_other_reasons(
    server: KubeServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a node cordoned by hand, and an owner that counts such nodes
    add_nodes(server, 3)
    core = core_api(server)
    core.patch_node(node_name(2), {"spec": {"unschedulable": True}})
    green = Drain.connect(server, SharedMetrics(), total="2", per_zone="1", owner="green")
    green.acquire(SlotRequest(node_name(0), instance_of(0), zone_of(0), "green", "rec-0"))

    # When the budget is shown
    assert run(kubeconfig, "show") == 0

    # Then the node is listed with the owner that counts it
    out = capsys.readouterr().out
    assert "yes (1 now)" in out
    section = out.split("UNAVAILABLE FOR OTHER REASONS")[1].splitlines()
    assert section[2].split() == [node_name(2), "green"]
    green.close()
    core.api_client.close()


@pytest.mark.parametrize("action", [("show",), ("release", node_name(0), "--yes")])
def test_a_budget_of_a_format_this_version_cannot_read_is_one_line_that_names_it(
    server: KubeServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str], action: tuple[str, ...]
) -> None:
    # Given a budget written by a newer nodecycle (another stack sharing the cluster was upgraded)
    newer = json.dumps({"formatVersion": 99, "holders": [], "waiters": []})
    admin_api(server).patch_namespaced_config_map(
        "nodecycle-budget", NAMESPACE, {"data": {"budget.json": newer}}
    )

    # When the operator runs the command as `nodecycle` does
    code = main(["budget", *action, "--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE])

    # Then one line names the ConfigMap and the format, not a traceback, and the budget is left as it was
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert f"ConfigMap {NAMESPACE}/nodecycle-budget" in err
    assert "format 99" in err
    stored = admin_api(server).read_namespaced_config_map("nodecycle-budget", NAMESPACE)
    assert (stored.data or {}).get("budget.json") == newer


def test_a_release_that_loses_a_race_with_renewals_reads_again_and_frees_the_slot(
    blue: DisruptionBudget, server: KubeServer, kubeconfig: Path
) -> None:
    # Given drains renewing their slots: the release's first two writes find the budget changed (409)
    server.faults.arm([Fault("renewals", "kube-conflict", target="PUT configmaps", limit=2)], seed=1)

    # When the operator releases a slot
    assert run(kubeconfig, "release", node_name(0), "--yes") == 0

    # Then it read the budget again and freed that slot, and only that one
    assert [v.node for v in blue.snapshot().holders] == [node_name(1)]


def test_a_release_that_keeps_losing_the_race_is_one_line_and_releases_nothing(
    blue: DisruptionBudget, server: KubeServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a budget that changes under every write (409s: a storm of renewals in a large refresh)
    server.faults.arm([Fault("storm", "kube-conflict", target="PUT configmaps")], seed=1)

    # When the operator releases a slot as `nodecycle` runs the command
    code = main(["budget", "release", node_name(0), "--yes", "--kubeconfig", str(kubeconfig)])
    server.faults.disarm()

    # Then one line says the budget kept changing and nothing was released, and the slot is still held
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert f"ConfigMap {NAMESPACE}/nodecycle-budget kept changing" in err
    assert "nothing released" in err
    assert [v.node for v in blue.snapshot().holders] == [node_name(0), node_name(1)]


@pytest.fixture
def stack_of_owner_green(monkeypatch: pytest.MonkeyPatch) -> str:
    """A stack `green-nodes` whose OwnerId output is green, as DescribeStacks describes it (no cluster
    parameter: the kubeconfig is not compared with one)."""
    described = {"StackName": "green-nodes", "Outputs": [{"OutputKey": "OwnerId", "OutputValue": "green"}]}
    monkeypatch.setattr(budget_cli, "session", lambda args: None)
    monkeypatch.setattr(budget_cli, "find", lambda aws, name: from_description(described, "eu-west-1"))
    return "green-nodes"


def test_a_release_for_a_stack_of_a_slot_another_owner_holds_is_refused_without_asking(
    blue: DisruptionBudget,
    kubeconfig: Path,
    stack_of_owner_green: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given an operator acting for stack green-nodes (owner green), told not to be asked
    monkeypatch.setattr("builtins.input", lambda prompt: pytest.fail("asked"))

    # When they release, by mistake, the slot of a node blue holds
    code = main(
        [
            "budget",
            "release",
            node_name(0),
            "--yes",
            "--stack",
            stack_of_owner_green,
            "--kubeconfig",
            str(kubeconfig),
            "--namespace",
            NAMESPACE,
        ]
    )

    # Then nothing is released (invariant 3), and one line says whose slot it is and how to free it anyway
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "held by owner blue, not by stack green-nodes (owner green)" in err
    assert [v.node for v in blue.snapshot().holders] == [node_name(0), node_name(1)]


def test_a_release_for_a_stack_of_a_slot_another_owner_holds_asks_and_names_both_owners(
    blue: DisruptionBudget,
    kubeconfig: Path,
    stack_of_owner_green: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given an operator acting for stack green-nodes who is asked
    questions: list[str] = []

    def decline(prompt: str) -> str:
        questions.append(prompt)
        return ""

    monkeypatch.setattr("builtins.input", decline)

    # When they release the slot of a node blue holds, and do not confirm
    assert run(kubeconfig, "release", node_name(0), "--stack", stack_of_owner_green) == 1

    # Then the question said the slot is another owner's, and nothing is released
    (question,) = questions
    assert question.startswith(
        f"Release the budget slot of {node_name(0)} held by blue, not by stack green-nodes (owner green) (its drain "
    )
    assert len(blue.snapshot().holders) == 2


class DeniedEks:
    """EKS as it answers a principal without eks:DescribeCluster."""

    def describe_cluster(self, name: str) -> dict[str, object]:
        raise ClientError(
            {
                "Error": {
                    "Code": "AccessDeniedException",
                    "Message": f"User: arn:aws:iam::123456789012:user/ops is not authorized to perform: "
                    f"eks:DescribeCluster on resource: arn:aws:eks:eu-west-1:123456789012:cluster/{name}",
                }
            },
            "DescribeCluster",
        )


class SessionWithoutDescribeCluster:
    def client(self, service: str) -> DeniedEks:
        assert service == "eks", service
        return DeniedEks()


def test_show_for_a_stack_without_leave_to_describe_its_cluster_warns_that_it_cannot_compare_and_shows(
    blue: DisruptionBudget,
    kubeconfig: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given an operator whose role may read the stack but not describe its EKS cluster (the comparison of the
    # kubeconfig's server with the stack's cluster needs it)
    described = {
        "StackName": "blue-nodes",
        "Parameters": [{"ParameterKey": "ClusterName", "ParameterValue": "prod"}],
        "Outputs": [{"OutputKey": "OwnerId", "OutputValue": "blue"}],
    }
    monkeypatch.setattr(budget_cli, "session", lambda args: SessionWithoutDescribeCluster())
    monkeypatch.setattr(budget_cli, "find", lambda aws, name: from_description(described, "eu-west-1"))

    # When they show the budget for the stack
    code = run(kubeconfig, "show", "--stack", "blue-nodes")

    # Then the budget is shown (the comparison is a courtesy, not the command's purpose), and one warning says
    # that it could not be made and why
    out, err = capsys.readouterr()
    assert code == 0
    assert node_name(0) in out
    assert err.count("\n") == 1
    assert "cannot check that the kubeconfig's context is cluster prod" in err
    assert "eks:DescribeCluster" in err


def test_a_release_whose_question_gets_no_answer_is_one_line_and_releases_nothing(
    blue: DisruptionBudget,
    kubeconfig: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given an operator whose input is closed (a script, a pipe, `< /dev/null`): the question reads end of file
    def closed(prompt: str) -> str:
        raise EOFError

    monkeypatch.setattr("builtins.input", closed)

    # When they release a slot without --yes, as `nodecycle` runs the command
    code = main(
        ["budget", "release", node_name(0), "--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE]
    )

    # Then one line says that the question got no answer and how to release without one, and the slot is kept
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "no answer" in err
    assert "--yes" in err
    assert [v.node for v in blue.snapshot().holders] == [node_name(0), node_name(1)]


def test_a_release_where_there_is_no_budget_says_so_not_that_the_node_holds_nothing(
    blue: DisruptionBudget, server: KubeServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a namespace without the budget ConfigMap (the stack keeps it in another BudgetNamespace, and the
    # operator did not pass --stack or --namespace)
    admin_api(server).delete_namespaced_config_map("nodecycle-budget", NAMESPACE)

    # When they release the slot of a node
    assert run(kubeconfig, "release", node_name(0), "--yes") == 1

    # Then they read that there is no budget there, and where it was looked for: not that the node holds nothing
    out = capsys.readouterr().out
    assert f"ConfigMap {NAMESPACE}/nodecycle-budget does not exist" in out
    assert "holds no budget slot" not in out


def test_a_release_for_a_stack_whose_cluster_is_not_the_kubeconfigs_is_refused(
    blue: DisruptionBudget,
    kubeconfig: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given stack blue-nodes (owner blue: its stack name, as in every account that deploys it so) of cluster prod,
    # and a kubeconfig whose context is another cluster where a node of that name holds a slot of owner blue
    with stack_of_cluster_prod(monkeypatch):
        # When the operator releases the slot of that node for the stack, without being asked
        code = main(
            [
                "budget",
                "release",
                node_name(0),
                "--yes",
                "--stack",
                "blue-nodes",
                "--kubeconfig",
                str(kubeconfig),
                "--namespace",
                NAMESPACE,
            ]
        )

    # Then nothing is released on a cluster that is not the stack's, and one line says why
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "the stack's cluster prod is at https://" in err
    assert "nothing released" in err
    assert [v.node for v in blue.snapshot().holders] == [node_name(0), node_name(1)]


class Behind:
    """A drain's clock, ``by`` behind the wall clock: its slot was taken and last renewed that long ago."""

    def __init__(self, by: timedelta) -> None:
        self._by = by

    def now(self) -> datetime:
        return datetime.now(UTC) - self._by


def _holding(server: KubeServer, node: int, renewed_ago: timedelta) -> DisruptionBudget:
    """Owner blue holding ``node``'s slot (TTL 300 s, renewed every 100 s by a running drain), last renewed
    ``renewed_ago``."""
    add_nodes(server, 2)
    api = core_api(server)
    budget = DisruptionBudget(
        store=ConfigMapBudgetStore(lambda: api, NAMESPACE),
        nodes=KubeNodeInventory(lambda: api),
        clock=Behind(renewed_ago),
        metrics=SharedMetrics(),
        limits=BudgetLimits(Quantity.parse("1"), Quantity.parse("1")),
        holder_ttl=timedelta(seconds=300),
        count_unavailable=False,
        owner="blue",
    )
    request = SlotRequest(node_name(node), instance_of(node), zone_of(node), owner="blue", record_id="rec-0")
    assert budget.acquire(request).granted
    return budget


def test_a_release_of_a_slot_its_drain_renewed_lately_says_the_drain_is_running_before_freeing_it(
    server: KubeServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a drain that renewed its slot 20 s ago (it renews every third of its 300 s TTL: it is running, held
    # up by a PodDisruptionBudget maybe, not stuck), and an operator who follows "free a stuck slot"
    budget = _holding(server, 0, renewed_ago=timedelta(seconds=20))
    questions: list[str] = []

    def confirm(prompt: str) -> str:
        questions.append(prompt)
        return "n"

    monkeypatch.setattr("builtins.input", confirm)

    # When they are asked
    assert run(kubeconfig, "release", node_name(0)) == 1

    # Then the question says that drain is running, and what freeing its slot does (another drain beside it)
    (question,) = questions
    assert re.search(r"its drain renewed it 2\ds ago", question)
    assert "running, not stuck" in question
    assert "past the limits" in question
    assert [h.node for h in budget.snapshot().holders] == [node_name(0)]

    # And with --yes, unasked, it is said on stderr before the slot is freed
    assert run(kubeconfig, "release", node_name(0), "--yes") == 0
    err = capsys.readouterr().err
    assert "warning:" in err
    assert "running, not stuck" in err
    assert budget.snapshot().holders == []


def test_a_release_of_a_slot_its_drain_stopped_renewing_asks_as_before(
    server: KubeServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a drain that has not renewed its slot for 150 s, past the third of its TTL it renews at: stuck
    _holding(server, 0, renewed_ago=timedelta(seconds=150))
    questions: list[str] = []

    def confirm(prompt: str) -> str:
        questions.append(prompt)
        return "y"

    monkeypatch.setattr("builtins.input", confirm)

    # When it is released
    assert run(kubeconfig, "release", node_name(0)) == 0

    # Then the question is the plain one, and nothing is said of a running drain
    assert questions == [f"Release the budget slot of {node_name(0)} held by blue? [y/N] "]
    assert "running" not in capsys.readouterr().err


@pytest.mark.parametrize("output", ["table", "json"])
def test_show_for_a_stack_through_another_clusters_kubeconfig_is_no_success(
    blue: DisruptionBudget,
    kubeconfig: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    output: str,
) -> None:
    # Given stack blue-nodes of cluster prod, and a kubeconfig whose context is another cluster (whose budget has
    # holders of an owner blue too: each account deploys the stack under one name)
    with stack_of_cluster_prod(monkeypatch):
        # When a script (or an operator in an incident) shows the stack's budget
        code = main(
            [
                *("budget", "show", "--stack", "blue-nodes", "-o", output),
                *("--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE),
            ]
        )

    # Then the exit status says something is wrong, and the warning names both clusters
    out, err = capsys.readouterr()
    assert code == 1
    assert "the stack's cluster prod is at https://" in err
    if output == "json":
        # and JSON carries the error object, never the other cluster's budget as the stack's
        assert json.loads(out)["error"]["exit_status"] == 1
        assert node_name(0) not in out
    else:
        # while a person still sees what the kubeconfig's cluster holds, under the warning
        assert node_name(0) in out
