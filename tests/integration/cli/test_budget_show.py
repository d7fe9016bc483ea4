"""``nodecycle budget show --stack NAME`` on a cluster without the budget ConfigMap (the cluster side never
applied): the command it says to run installs what the stack needs, for the stack's own ``KubernetesGroup``.
Rendered without ``--group-prefix`` it binds nodecycle-drain and nodecycle-sweeper, and the stack's functions
stay refused the budget after the operator ran it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodecycle_cli import budget as budget_cli
from nodecycle_cli.deployment import from_description
from nodecycle_cli.doctor import cluster_checks
from nodecycle_cli.doctor.findings import Status
from nodecycle_cli.main import main
from nodecycle_sandbox.kube import KubeServer
from tests.functions.test_doctor_fix_commands import IDENTITIES, NAMESPACE, PREFIX, run_fix


@pytest.fixture
def server() -> Iterator[KubeServer]:
    with KubeServer(tls=True) as started:
        yield started


def test_the_install_command_of_a_missing_budget_is_for_the_stacks_groups(
    server: KubeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given stack team-nodes (BudgetNamespace team-budget, KubernetesGroup team) on a cluster without its RBAC
    described = {
        "StackName": "team-nodes",
        "Parameters": [
            {"ParameterKey": "BudgetNamespace", "ParameterValue": NAMESPACE},
            {"ParameterKey": "KubernetesGroup", "ParameterValue": PREFIX},
        ],
        "Outputs": [{"OutputKey": "OwnerId", "OutputValue": "team"}],
    }
    monkeypatch.setattr(budget_cli, "session", lambda args: None)
    monkeypatch.setattr(budget_cli, "find", lambda aws, name: from_description(described, "eu-west-1"))
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")

    # When the operator shows its budget, and runs the command it gives
    assert main(["budget", "show", "--stack", "team-nodes", "--kubeconfig", str(kubeconfig)]) == 1
    note = capsys.readouterr().out
    run_fix(server, note.split("Apply it with the RBAC: ", 1)[1].strip())

    # Then the stack's functions may use the budget (and make their other calls)
    api = server.api_client()
    assert {f.status for f in cluster_checks.permissions(api, IDENTITIES, NAMESPACE, True, PREFIX)} == {
        Status.OK
    }


def test_budget_show_asked_for_json_on_a_cluster_without_the_budget_says_so_in_json(
    server: KubeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a cluster without the budget ConfigMap
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")

    # When a script asks for the budget in JSON
    code = main(["budget", "show", "--kubeconfig", str(kubeconfig), "--json"])

    # Then stdout is the error object every command asked for JSON gives when it fails (not a bare null, which
    # `jq .holders` reads as an empty budget), with the note that says what to apply; the note is on stderr too
    out, err = capsys.readouterr()
    assert code == 1
    error = json.loads(out)["error"]
    assert error["command"] == "budget show"
    assert error["exit_status"] == 1
    assert error["message"].startswith("No budget: ConfigMap nodecycle/nodecycle-budget does not exist")
    assert error["message"] in err
