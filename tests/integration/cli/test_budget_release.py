"""``nodecycle budget release NODE`` against the sandbox's API server.

Refusing, with ``--stack NAME --yes``, to free a slot another owner holds (invariant 3), what it then tells the
operator to do never frees that slot unasked: dropping ``--stack`` while keeping ``--yes`` would release it with
no question at all.

A release whose write landed but whose answer was lost (the connection closed before the response) tells the
operator what is true: the slot is no longer held by the lifecycle it confirmed. With urllib3's default retries
the CLI's client sent the PUT again, met the conflict of its own first write, read the budget again, found the
holder gone and said "changed meanwhile: nothing released" (exit 1) for a slot it had released."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

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
    act_as_drain,
    add_nodes,
    core_api,
    instance_of,
    node_name,
    zone_of,
)
from tests.integration.budget.drains import SharedMetrics, WallClock
from tests.integration.budget.test_cli import SessionWithoutDescribeCluster


@pytest.fixture
def blue_holds_node_0(tmp_path: Path) -> Iterator[tuple[KubeServer, Path, DisruptionBudget]]:
    """A cluster where owner blue holds the slot of node 0: the API server, a kubeconfig, blue's budget."""
    with KubeServer(tls=True) as server:
        act_as_drain(server)
        add_nodes(server, 3)
        api = core_api(server)
        blue = DisruptionBudget(
            store=ConfigMapBudgetStore(lambda: api, NAMESPACE),
            nodes=KubeNodeInventory(lambda: api),
            clock=WallClock(),
            metrics=SharedMetrics(),
            limits=BudgetLimits(Quantity.parse("2"), Quantity.parse("1")),
            holder_ttl=timedelta(seconds=300),
            count_unavailable=False,
            owner="blue",
        )
        assert blue.acquire(SlotRequest(node_name(0), instance_of(0), zone_of(0), "blue", "rec-0")).granted
        yield server, server.write_kubeconfig(tmp_path / "kubeconfig"), blue
        api.api_client.close()


@pytest.fixture
def blue_holds_a_slot(
    blue_holds_node_0: tuple[KubeServer, Path, DisruptionBudget], monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, DisruptionBudget]:
    """The same, the operator acting for stack green-nodes (owner green), whose stack description names no
    cluster."""
    _, kubeconfig, blue = blue_holds_node_0
    described = {
        "StackName": "green-nodes",
        "Outputs": [{"OutputKey": "OwnerId", "OutputValue": "green"}],
    }
    monkeypatch.setattr(budget_cli, "session", lambda args: None)
    monkeypatch.setattr(budget_cli, "find", lambda aws, name: from_description(described, "eu-west-1"))
    return kubeconfig, blue


def test_the_refusal_to_free_another_owners_slot_never_points_at_a_release_without_a_question(
    blue_holds_a_slot: tuple[Path, DisruptionBudget],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kubeconfig, blue = blue_holds_a_slot
    monkeypatch.setattr("builtins.input", lambda prompt: pytest.fail(f"asked: {prompt}"))
    common = ["--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE]

    # Given the operator of stack green-nodes releasing, by mistake, the slot of a node blue holds, unasked
    refused = main(["budget", "release", node_name(0), "--stack", "green-nodes", "--yes", *common])
    said = capsys.readouterr().err
    assert refused == 2
    assert [h.node for h in blue.snapshot().holders] == [node_name(0)]

    # When they do what the refusal says (each way it offers, their --yes kept unless it says to drop it)
    advice = said.split("nothing released", 1)[1]
    assert "--stack" not in advice.replace("with --stack", ""), said
    assert "without --yes" in advice, said

    # Then a release without --stack but still with --yes (what the refusal must not suggest) would free blue's
    # slot with no question: the reason the advice is to drop --yes
    argv = shlex.split(f"budget release {node_name(0)} --yes") + common
    assert main(argv) == 0
    assert list(blue.snapshot().holders) == []


def test_a_release_whose_answer_is_lost_says_the_slot_is_no_longer_held(
    blue_holds_node_0: tuple[KubeServer, Path, DisruptionBudget], capsys: pytest.CaptureFixture[str]
) -> None:
    server, kubeconfig, blue = blue_holds_node_0
    # Given the API server that will apply the next write of the budget and lose its answer
    server.faults.arm([Fault("lost", "kube-lost-response", target="PUT configmaps", limit=1)], seed=1)

    # When the operator releases the slot unasked
    where = ["--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE]
    code = main(["budget", "release", node_name(0), "--yes", *where])
    said = capsys.readouterr()

    # Then the write landed once, the slot is free, and the operator is told so, not "nothing released"
    assert [f.kind for f in server.faults.firings()] == ["kube-lost-response"]
    assert [h.node for h in blue.snapshot().holders] == []
    assert "nothing released" not in said.out + said.err
    assert "no longer held by lifecycle rec-0" in said.out
    assert code == 0


def test_a_release_the_cluster_forbids_says_nothing_was_released(
    blue_holds_node_0: tuple[KubeServer, Path, DisruptionBudget], capsys: pytest.CaptureFixture[str]
) -> None:
    server, kubeconfig, blue = blue_holds_node_0
    # Given an operator whose role may read the budget but not write it (the API server's 403 to the PUT)
    server.faults.arm([Fault("forbidden", "kube-forbidden", target="PUT configmaps")], seed=1)

    # When they release the slot unasked
    where = ["--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE]
    code = main(["budget", "release", node_name(0), "--yes", *where])
    said = capsys.readouterr()

    # Then the slot is still held, and the one line says what was refused and that nothing was released
    assert [f.kind for f in server.faults.firings()] == ["kube-forbidden"]
    assert [h.node for h in blue.snapshot().holders] == [node_name(0)]
    assert code == 2
    assert said.err.count("\n") == 1
    assert 'cannot update resource "configmaps"' in said.err
    assert "nothing released" in said.err


def test_a_release_by_the_instance_id_frees_the_slot_of_its_node(
    blue_holds_node_0: tuple[KubeServer, Path, DisruptionBudget], capsys: pytest.CaptureFixture[str]
) -> None:
    _, kubeconfig, blue = blue_holds_node_0
    # Given an operator who has the instance id (the alarm's, the logs' instance_id), not the node's name
    where = ["--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE]

    # When they release the slot by it
    code = main(["budget", "release", instance_of(0), "--yes", *where])
    said = capsys.readouterr()

    # Then the slot its node holds is freed, and told by that node's name (not "holds no budget slot")
    assert "holds no budget slot" not in said.out
    assert list(blue.snapshot().holders) == []
    assert code == 0
    assert f"Released the budget slot of {node_name(0)}" in said.out


def test_a_release_unasked_for_a_stack_whose_cluster_cannot_be_checked_frees_nothing(
    blue_holds_node_0: tuple[KubeServer, Path, DisruptionBudget],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, kubeconfig, blue = blue_holds_node_0
    # Given the operator of stack blue-nodes (owner blue, cluster prod) whose role may not describe the cluster,
    # so the kubeconfig cannot be told to be prod's (the same stack deployed in another account has the same
    # owner id, and its own slots on its own cluster)
    described = {
        "StackName": "blue-nodes",
        "Parameters": [{"ParameterKey": "ClusterName", "ParameterValue": "prod"}],
        "Outputs": [{"OutputKey": "OwnerId", "OutputValue": "blue"}],
    }
    monkeypatch.setattr(budget_cli, "session", lambda args: SessionWithoutDescribeCluster())
    monkeypatch.setattr(budget_cli, "find", lambda aws, name: from_description(described, "eu-west-1"))
    monkeypatch.setattr("builtins.input", lambda prompt: pytest.fail(f"asked: {prompt}"))

    # When they release the slot of node 0 unasked
    where = ["--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE]
    code = main(["budget", "release", node_name(0), "--stack", "blue-nodes", "--yes", *where])

    # Then nothing is released, and the one line says why and how to go on (asked, or granted the check)
    err = capsys.readouterr().err
    assert [h.node for h in blue.snapshot().holders] == [node_name(0)]
    assert code == 2
    assert "nothing released" in err
    assert "without --yes" in err
    assert "eks:DescribeCluster" in err
