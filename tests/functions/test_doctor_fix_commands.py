"""The command a doctor's finding gives to fix the cluster side fixes it, for a stack whose ``KubernetesGroup``
is not the template's default: ``nodecycle rbac`` binds the groups its ``--group-prefix`` names, so a fix
rendered without it binds ``nodecycle-drain`` and ``nodecycle-sweeper`` (another stack's groups, or no one's)
and the functions' own groups stay refused, finding after finding.

Against the sandbox's API server, whose authorizer answers the SubjectAccessReviews from the RBAC applied."""

from __future__ import annotations

import contextlib
import io
import shlex
from collections.abc import Iterator

import pytest

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
    with KubeServer() as started:
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
