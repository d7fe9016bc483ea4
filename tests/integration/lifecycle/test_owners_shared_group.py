"""Two stacks managing the same Auto Scaling group by mistake (both name it, both answer its default hooks):
one terminate action, two lifecycles, one node. The one that claims the node drains it; the other leaves it
alone and must not complete the action under that drain (invariants 2 and 3)."""

from __future__ import annotations

import json

import pytest
from kubernetes.client import PolicyV1Api

from nodecycle.domain.ports.cluster import OWNER_ANNOTATION
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.group import HookSpec, default_hooks
from nodecycle_sandbox.aws.records import TERMINATING, ActionRecord
from nodecycle_sandbox.checks import completed_before_drained
from nodecycle_sandbox.kube.history import HistoryEntry
from tests.integration.lifecycle.harness import FAST, node_of, pin, running, wait_for

pytestmark = pytest.mark.slow

# The stack that does not claim the node waits for the claimant's drain as a budget waiter, asking again every
# BudgetRetrySeconds: asked every second, its four steps under that drain take seconds rather than 20 (FAST's
# 5 s). Two instances: one to terminate, one beside it (the count plays no part).
QUICK = {**FAST, "BudgetRetrySeconds": "1"}


def test_a_group_both_stacks_manage_is_drained_by_one_and_its_action_completed_only_after_that_drain() -> (
    None
):
    # Given stack "nodecycle" and stack "nodecycle-b", both naming group nodecycle-workers (and its hooks)
    with running(parameters=QUICK, size=2, workloads=None) as sandbox:
        stack_b, _ = sandbox.add_stack(
            "nodecycle-b",
            parameters={**QUICK, "OwnerId": "nodecycle-b", "ManagedGroups": sandbox.asg.name},
        )
        victim = sorted(sandbox.asg.in_state("InService"))[0]
        node = node_of(sandbox, victim)
        # ...and on the victim's node a pod its PodDisruptionBudget will not let go, for now (its creation in the
        # history: without it the history has no pod on the node to find still there at the completion)
        sandbox.kube.reset_history()
        pin(sandbox, node, namespace="b")

        # When the instance terminates: both stacks get its one action
        sandbox.asg.terminate(victim)
        claimant = wait_for(lambda: claimant_of(sandbox, node), 60, "a stack claiming the node")
        other = stack_b if claimant == "nodecycle" else sandbox.runner
        # (the other stack's drain runs several times while the node's drain is stuck)
        seen = len(other.journal.invocations("DrainFunction"))
        wait_for(  # (or the action completed under that drain: the defect, told below without the wait)
            lambda: (
                len(other.journal.invocations("DrainFunction")) >= seen + 4
                or not action_of(sandbox, victim).active
                or None
            ),
            120,
            "the other stack's drain steps",
        )
        action = action_of(sandbox, victim)
        assert action.active, f"completed under the drain of {claimant}: {action}"
        assert json.loads(_budget(sandbox))["holders"][0]["owner"] == claimant
        # ...and then the pod may go
        PolicyV1Api(sandbox.kube.api_client()).delete_namespaced_pod_disruption_budget("pinned", "b")
        wait_for(lambda: not action_of(sandbox, victim).active or None, 90, "the action's completion")

        # Then the action was completed once the node was drained, and only the claimant ever annotated it
        history = sandbox.kube.history()
        assert completed_before_drained(history, [action_of(sandbox, victim)]) == []
        assert owners_ever(history, node) == {claimant}


def test_a_group_with_a_terminate_hook_of_each_stack_is_completed_by_each_only_after_the_drain() -> None:
    # Given stack "nodecycle" answering hook nodecycle-terminate and stack "nodecycle-b" answering its own hook
    # nodecycle-b-terminate, both on group nodecycle-workers: one termination, two actions
    hooks = (*default_hooks(300), HookSpec("nodecycle-b-terminate", TERMINATING, 300, "CONTINUE"))
    with running(parameters=QUICK, size=2, workloads=None, hooks=hooks) as sandbox:
        stack_b, _ = sandbox.add_stack(
            "nodecycle-b",
            parameters={
                **QUICK,
                "OwnerId": "nodecycle-b",
                "ManagedGroups": sandbox.asg.name,
                "ManagedHooks": "nodecycle-b-terminate",
            },
        )
        victim = sorted(sandbox.asg.in_state("InService"))[0]
        node = node_of(sandbox, victim)
        sandbox.kube.reset_history()  # (before the pin: see the first test)
        pin(sandbox, node, namespace="b")

        # When the instance terminates, both stacks' drains run a while on the stuck node, then the pod may go
        sandbox.asg.terminate(victim)
        claimant = wait_for(lambda: claimant_of(sandbox, node), 60, "a stack claiming the node")
        other = stack_b if claimant == "nodecycle" else sandbox.runner
        seen = len(other.journal.invocations("DrainFunction"))
        wait_for(  # (or an action completed under the drain: the defect, told below without the wait)
            lambda: (
                len(other.journal.invocations("DrainFunction")) >= seen + 4
                or any(not a.active for a in _actions(sandbox, victim))
                or None
            ),
            120,
            "the other stack's drain steps",
        )
        PolicyV1Api(sandbox.kube.api_client()).delete_namespaced_pod_disruption_budget("pinned", "b")
        wait_for(
            lambda: all(not a.active for a in _actions(sandbox, victim)) or None,
            120,
            "both actions' completion",
        )

        # Then both actions were completed (by a call) and neither while a drainable pod was still on the node;
        # and no stack ever overwrote the other's claim of the node (owner A to owner B without a release)
        actions = _actions(sandbox, victim)
        assert sorted(a.hook for a in actions) == ["nodecycle-b-terminate", "nodecycle-terminate"]
        assert [a.outcome for a in actions] == ["completed", "completed"]
        history = sandbox.kube.history()
        assert completed_before_drained(history, actions) == []
        assert _overwritten_claims(history, node) == []


def _actions(sandbox: Sandbox, instance: str) -> list[ActionRecord]:
    return [a for a in sandbox.asg.actions(transition=TERMINATING) if a.instance_id == instance]


def _overwritten_claims(history: list[HistoryEntry], node: str) -> list[tuple[str, str]]:
    """The writes of the node that changed its owner annotation from one owner to another directly."""
    overwritten, last = [], None
    for entry in history:
        if entry.kind != "Node" or entry.name != node:
            continue
        owner = ((entry.object.get("metadata") or {}).get("annotations") or {}).get(OWNER_ANNOTATION)
        if last is not None and owner is not None and owner != last:
            overwritten.append((last, owner))
        last = owner
    return overwritten


def claimant_of(sandbox: Sandbox, node: str) -> str | None:
    """The owner whose claim the cordoned ``node`` carries; None while it is not cordoned."""
    found = sandbox.kube.get_object("nodes", node)
    if found is None or not (found.get("spec") or {}).get("unschedulable"):
        return None
    return ((found["metadata"].get("annotations") or {}).get(OWNER_ANNOTATION)) or None


def action_of(sandbox: Sandbox, instance: str) -> ActionRecord:
    """The terminate action of ``instance``."""
    return next(a for a in sandbox.asg.actions(transition=TERMINATING) if a.instance_id == instance)


def owners_ever(history: list[HistoryEntry], node: str) -> set[str]:
    """Every owner that ever annotated ``node``, as the API server's history tells."""
    owners = {
        ((e.object.get("metadata") or {}).get("annotations") or {}).get(OWNER_ANNOTATION)
        for e in history
        if e.kind == "Node" and e.name == node
    }
    return {owner for owner in owners if owner is not None}


def _budget(sandbox: Sandbox) -> str:
    configmap = sandbox.kube.get_object("configmaps", "nodecycle-budget", "nodecycle") or {}
    return str((configmap.get("data") or {}).get("budget.json", "{}"))
