"""``nodecycle budget release NODE --stack NAME --yes`` refuses to free a slot another owner holds (invariant 3),
and what it then tells the operator to do never frees that slot unasked: dropping ``--stack`` while keeping
``--yes`` would release it with no question at all."""

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


@pytest.fixture
def blue_holds_a_slot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Path, DisruptionBudget]]:
    """A cluster where owner blue holds the slot of node 0; the operator acts for stack green-nodes (owner
    green), whose stack description names no cluster."""
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
        described = {
            "StackName": "green-nodes",
            "Outputs": [{"OutputKey": "OwnerId", "OutputValue": "green"}],
        }
        monkeypatch.setattr(budget_cli, "session", lambda args: None)
        monkeypatch.setattr(budget_cli, "find", lambda aws, name: from_description(described, "eu-west-1"))
        yield server.write_kubeconfig(tmp_path / "kubeconfig"), blue
        api.api_client.close()


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
