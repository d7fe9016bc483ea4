"""``nodecycle budget release NODE --yes`` whose write landed but whose answer was lost (the connection closed
before the response) tells the operator what is true: the slot is no longer held by the lifecycle it confirmed.
With urllib3's default retries the CLI's client sent the PUT again, met the conflict of its own first write, read
the budget again, found the holder gone and said "changed meanwhile: nothing released" (exit 1) for a slot it
had released; an operator who believed it would release again, by hand, something else."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from nodecycle.adapters.kube.budget import ConfigMapBudgetStore, KubeNodeInventory
from nodecycle.domain.budget import BudgetLimits, DisruptionBudget, SlotRequest
from nodecycle.domain.policy import Quantity
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


@pytest.fixture
def a_slot_held(tmp_path: Path) -> Iterator[tuple[KubeServer, Path, DisruptionBudget]]:
    """A cluster where owner blue holds the slot of node 0."""
    with KubeServer(tls=True) as server:
        act_as_drain(server)
        add_nodes(server, 2)
        api = core_api(server)
        blue = DisruptionBudget(
            store=ConfigMapBudgetStore(lambda: api, NAMESPACE),
            nodes=KubeNodeInventory(lambda: api),
            clock=WallClock(),
            metrics=SharedMetrics(),
            limits=BudgetLimits(Quantity.parse("1"), None),
            holder_ttl=timedelta(seconds=300),
            count_unavailable=False,
            owner="blue",
        )
        assert blue.acquire(SlotRequest(node_name(0), instance_of(0), zone_of(0), "blue", "rec-0")).granted
        yield server, server.write_kubeconfig(tmp_path / "kubeconfig"), blue
        api.api_client.close()


def test_a_release_whose_answer_is_lost_says_the_slot_is_no_longer_held(
    a_slot_held: tuple[KubeServer, Path, DisruptionBudget], capsys: pytest.CaptureFixture[str]
) -> None:
    server, kubeconfig, blue = a_slot_held
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
