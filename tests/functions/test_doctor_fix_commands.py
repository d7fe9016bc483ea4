"""The command a doctor's finding gives to fix the cluster side fixes it, for a stack whose ``KubernetesGroup``
is not the template's default: ``nodecycle rbac`` binds the groups its ``--group-prefix`` names, so a fix
rendered without it binds ``nodecycle-drain`` and ``nodecycle-sweeper`` (another stack's groups, or no one's)
and the functions' own groups stay refused, finding after finding.

The fix of a budget document nodecycle cannot read touches that document only: ``kubectl replace --force`` of
the whole rendered manifest deleted the Namespace (and whatever else it held), the functions' ClusterRoles and
bindings, then failed on the kube-node-lease Role (``-n`` another namespace) and left no budget at all.

Against the sandbox's API server, whose authorizer answers the SubjectAccessReviews from the RBAC applied (and
the real kubectl, for a fix that is a kubectl command)."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from nodecycle_cli import rbac
from nodecycle_cli.doctor import cluster_checks
from nodecycle_cli.doctor.findings import Status
from nodecycle_cli.doctor.permissions import Identity
from nodecycle_cli.main import main
from nodecycle_sandbox.kube import KubeServer

NAMESPACE, PREFIX = "team-budget", "team"  # the stack's BudgetNamespace and KubernetesGroup
IDENTITIES = [
    Identity("drain", "arn:aws:iam::123456789012:role/team-drain", (f"{PREFIX}-drain",)),
    Identity("sweeper", "arn:aws:iam::123456789012:role/team-sweeper", (f"{PREFIX}-sweeper",)),
]


@pytest.fixture
def server() -> Iterator[KubeServer]:
    with KubeServer(tls=True) as started:
        yield started


def run_fix(server: KubeServer, fix: str) -> None:
    """What the operator does with ``nodecycle rbac ... | kubectl apply -f -``: the command as written."""
    command, pipe = fix.split(" | ", 1)
    assert pipe.startswith("kubectl apply -f -"), fix
    rendered = io.StringIO()
    with contextlib.redirect_stdout(rendered):
        assert main(shlex.split(command)[1:]) == 0
    server.apply(rendered.getvalue())


def test_the_fix_of_a_refused_permission_grants_it_to_the_stacks_own_groups(server: KubeServer) -> None:
    # Given a cluster where nothing of the stack's RBAC was applied
    api = server.api_client()
    (drain, sweeper) = cluster_checks.permissions(api, IDENTITIES, NAMESPACE, None, PREFIX)
    assert drain.status == sweeper.status == Status.PROBLEM

    # When the operator runs the fix the drain's finding gives
    run_fix(server, drain.fix)

    # Then both functions may make their calls
    assert {f.status for f in cluster_checks.permissions(api, IDENTITIES, NAMESPACE, None, PREFIX)} == {
        Status.OK
    }


def test_the_fix_of_a_missing_budget_configmap_binds_the_stacks_own_groups(server: KubeServer) -> None:
    # Given a cluster without the budget ConfigMap (nor anything else of the stack's RBAC)
    api = server.api_client()
    missing, exists = cluster_checks.budget_configmap(api, NAMESPACE, PREFIX)
    assert (missing.status, exists) == (Status.PROBLEM, False)

    # When the operator runs the fix it gives
    run_fix(server, missing.fix)

    # Then the ConfigMap is there, and what it ships with lets the stack's functions use it
    assert cluster_checks.budget_configmap(api, NAMESPACE, PREFIX)[0].status == Status.OK
    assert {f.status for f in cluster_checks.permissions(api, IDENTITIES, NAMESPACE, True, PREFIX)} == {
        Status.OK
    }


def test_the_fix_of_an_unreadable_budget_touches_the_budget_only(server: KubeServer, tmp_path: Path) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is required by this test and is not on PATH")
    # Given the stack's RBAC applied, a ConfigMap of the platform's beside the budget in its namespace, and a
    # budget document edited by hand into one nodecycle cannot read
    server.apply(rbac.render(NAMESPACE, PREFIX))
    api = server.api_client()
    core = client.CoreV1Api(api)
    theirs = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="platform-settings"), data={"team": "a"})
    core.create_namespaced_config_map(NAMESPACE, theirs)
    budget = core.read_namespaced_config_map("nodecycle-budget", NAMESPACE)
    budget.data = {"budget.json": "{not json"}
    core.replace_namespaced_config_map("nodecycle-budget", NAMESPACE, budget)
    unreadable, _ = cluster_checks.budget_configmap(api, NAMESPACE, PREFIX)
    assert unreadable.status == Status.PROBLEM

    # When the operator runs the fix it gives for a document that is nodecycle's
    (fix,) = re.findall(r"if it is(?:, and no drain runs)?: (.*)$", unreadable.fix)
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(tmp_path)}
    subprocess.run(["bash", "-c", fix], env=env, capture_output=True, text=True, timeout=60, check=False)

    # Then the budget reads again, and nothing else changed: the platform's ConfigMap, the functions' permissions
    assert cluster_checks.budget_configmap(api, NAMESPACE, PREFIX)[0].status == Status.OK
    assert core.read_namespaced_config_map("platform-settings", NAMESPACE).data == {"team": "a"}
    assert {f.status for f in cluster_checks.permissions(api, IDENTITIES, NAMESPACE, True, PREFIX)} == {
        Status.OK
    }
