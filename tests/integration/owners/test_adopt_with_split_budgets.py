"""Two stacks on one cluster, each with a budget of its own (another BudgetNamespace: the template's "a stack of
another namespace keeps a budget of its own, apart"), both answering one group's terminate hook (by mistake). The
one that claims the node drains it. The other's budget holds no slot of the claimant, which writes none there: that
tells nothing of whether the claimant's drain is alive, and the node is not adopted from under it (invariant 3)."""

from __future__ import annotations

import pytest
from kubernetes.client import PolicyV1Api

from nodecycle_cli.rbac import render
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.checks import completed_before_drained
from tests.integration.lifecycle.harness import FAST, node_of, pin, running, wait_for
from tests.integration.lifecycle.test_owners_shared_group import action_of, claimant_of, owners_ever

pytestmark = pytest.mark.slow

QUICK = {**FAST, "BudgetRetrySeconds": "1"}
NAMESPACE_B = "team-b"  # stack nodecycle-b's BudgetNamespace (and KubernetesGroup prefix)


def test_a_node_another_stack_of_another_budget_drains_is_not_adopted_from_it() -> None:
    # Given stack "nodecycle" (budget in namespace nodecycle) and stack "nodecycle-b" (budget in namespace team-b,
    # its own RBAC as `nodecycle rbac --namespace team-b --group-prefix team-b` renders it), both naming group
    # nodecycle-workers and its hook
    with running(parameters=QUICK, size=3, workloads=None) as sandbox:
        sandbox.kube.apply(render(NAMESPACE_B, NAMESPACE_B))
        stack_b, _ = sandbox.add_stack(
            "nodecycle-b",
            parameters={
                **QUICK,
                "OwnerId": "nodecycle-b",
                "ManagedGroups": sandbox.asg.name,
                "BudgetNamespace": NAMESPACE_B,
                "KubernetesGroup": NAMESPACE_B,
            },
        )
        first, victim = sorted(sandbox.asg.in_state("InService"))[:2]
        # ...whose budgets each hold a document already (an earlier termination's, its node's drain held up by a pod
        # until both stacks asked their budgets for it: a budget never written is seeded from the nodes' claims,
        # whatever their owner, which hides what follows)
        pin(sandbox, node_of(sandbox, first), namespace="a")
        sandbox.asg.terminate(first)
        wait_for(lambda: _budget(sandbox, "nodecycle"), 60, "a budget document in nodecycle")
        wait_for(lambda: _budget(sandbox, NAMESPACE_B), 60, f"a budget document in {NAMESPACE_B}")
        PolicyV1Api(sandbox.kube.api_client()).delete_namespaced_pod_disruption_budget("pinned", "a")
        wait_for(lambda: not action_of(sandbox, first).active or None, 90, "the first action's completion")
        node = node_of(sandbox, victim)
        # ...and on the victim's node a pod its PodDisruptionBudget will not let go, for now
        sandbox.kube.reset_history()
        pin(sandbox, node, namespace="b")

        # When the instance terminates: both stacks get its one action; one claims the node
        sandbox.asg.terminate(victim)
        claimant = wait_for(lambda: claimant_of(sandbox, node), 60, "a stack claiming the node")
        other = stack_b if claimant == "nodecycle" else sandbox.runner
        seen = len(other.journal.invocations("DrainFunction"))
        wait_for(
            lambda: (
                len(other.journal.invocations("DrainFunction")) >= seen + 4
                or claimant_of(sandbox, node) != claimant
                or not action_of(sandbox, victim).active
                or None
            ),
            120,
            "the other stack's drain steps",
        )

        # Then the node is still the claimant's, and the action open under its drain
        assert claimant_of(sandbox, node) == claimant
        assert action_of(sandbox, victim).active
        # ...and once the pod may go, the action is completed after the drain, and no other owner ever claimed it
        PolicyV1Api(sandbox.kube.api_client()).delete_namespaced_pod_disruption_budget("pinned", "b")
        wait_for(lambda: not action_of(sandbox, victim).active or None, 90, "the action's completion")
        history = sandbox.kube.history()
        assert completed_before_drained(history, [action_of(sandbox, victim)]) == []
        assert owners_ever(history, node) == {claimant}


def _budget(sandbox: Sandbox, namespace: str) -> str | None:
    configmap = sandbox.kube.get_object("configmaps", "nodecycle-budget", namespace) or {}
    return (configmap.get("data") or {}).get("budget.json")
