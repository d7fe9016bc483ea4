"""Whole fleets: an instance refresh under a 4 / 2-per-zone budget, and two stacks sharing one cluster."""

from __future__ import annotations

import json

import pytest

from nodecycle.domain.ports.cluster import OWNER_ANNOTATION
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.group import GroupSpec
from nodecycle_sandbox.aws.records import TERMINATING
from nodecycle_sandbox.checks import (
    completed_before_drained,
    cordon_peaks,
    pdb_breaches,
    released_at,
    unsettled,
)
from tests.integration.lifecycle.harness import node_of, pin, running, wait_for

pytestmark = pytest.mark.slow


def test_an_instance_refresh_never_exceeds_the_budget_globally_or_in_any_zone() -> None:
    # Given 12 nodes over 3 zones and a budget of 4 at once, 2 per zone
    parameters = {"BudgetMaxUnavailable": "4", "BudgetMaxUnavailablePerZone": "2", "DrainConcurrency": "6"}
    with running(parameters=parameters, size=12) as sandbox:
        old = set(sandbox.asg.in_state("InService"))
        sandbox.kube.reset_history()

        # When the whole group is replaced at once (minimum healthy 0%: every old instance terminates)
        refresh = sandbox.asg.start_refresh(min_healthy_percentage=0)
        sandbox.asg.wait_refresh(refresh, timeout=240)

        # Then, from the API server's own history: never more than 4 nodes cordoned, never more than 2 in a
        # zone, and the budget was used to the full (4 at once at some point). A node counts until its action
        # was completed: its Node object outlives its instance, still cordoned, but its slot is free.
        history = sandbox.kube.history()
        terminations = [a for a in sandbox.asg.actions(transition=TERMINATING) if a.instance_id in old]
        peak, zones = cordon_peaks(history, released_at(history, terminations))
        assert peak == 4
        assert len(zones) == 3
        assert max(zones.values()) == 2
        assert pdb_breaches(history) == []
        assert len(terminations) == 12
        assert unsettled(terminations) == []
        assert completed_before_drained(history, terminations) == []


def test_two_stacks_on_one_cluster_never_touch_what_the_other_holds() -> None:
    # Given stack "nodecycle" with its group, and stack "stack-b" with its own group on the same cluster
    with running(size=3, workloads=None) as sandbox:
        stack_b, group_b = sandbox.add_stack(
            "stack-b",
            parameters={"OwnerId": "stack-b", "DrainPollSeconds": "1", "DrainTimeoutSeconds": "600"},
            group=GroupSpec(name="workers-b", size=2),
        )
        assert group_b is not None
        ours = set(sandbox.asg.in_state("InService"))
        theirs = set(group_b.wait_in_service(2, timeout=90))
        # ...and a pod on one of B's nodes that its budget will not let go
        held = sorted(theirs)[0]
        held_node = node_of(sandbox, held)
        pin(sandbox, held_node, namespace="b")

        # When B drains that node (and stays stuck on it), A drains one of its own, and A's sweeper runs
        group_b.terminate(held)
        wait_for(lambda: json.loads(_budget(sandbox)).get("holders"), 30, "stack-b holding a budget slot")
        # (in another zone: B's stuck drain fills the one slot per zone that A's budget allows there)
        held_zone = _zone(sandbox, held_node)
        mine = next(i for i in sorted(ours) if _zone(sandbox, node_of(sandbox, i)) != held_zone)
        sandbox.asg.terminate(mine)
        wait_for(
            lambda: next(
                (
                    a
                    for a in sandbox.asg.actions(transition=TERMINATING)
                    if a.instance_id == mine and not a.active
                ),
                None,
            ),
            60,
            "stack nodecycle's drain",
        )
        sandbox.runner.fire_schedule("SweeperFunction")
        wait_for(
            lambda: any(
                i.function == "SweeperFunction" and i.finished_at
                for i in sandbox.runner.journal.invocations()
            ),
            60,
            "stack nodecycle's sweep",
        )

        # Then B's node still carries B's annotations and B's budget slot, and no node ever carried the other
        # stack's owner annotation
        node = sandbox.kube.get_object("nodes", held_node)
        assert node is not None
        assert node["metadata"]["annotations"][OWNER_ANNOTATION] == "stack-b"
        holders = json.loads(_budget(sandbox))["holders"]
        assert [(h["node"], h["owner"]) for h in holders] == [(held_node, "stack-b")]
        owners_by_node: dict[str, set[str]] = {}
        for entry in sandbox.kube.history():
            if entry.kind == "Node":
                owner = ((entry.object.get("metadata") or {}).get("annotations") or {}).get(OWNER_ANNOTATION)
                if owner:
                    owners_by_node.setdefault(entry.name, set()).add(owner)
        nodes_of = {i: sandbox.kube.node_for_instance(i) for i in ours | theirs}
        for instance, node_name in nodes_of.items():
            expected = "nodecycle" if instance in ours else "stack-b"
            assert owners_by_node.get(node_name or "", {expected}) == {expected}, (instance, owners_by_node)
        assert stack_b.journal.invocations()  # stack-b really ran its own functions


def _zone(sandbox: Sandbox, node: str) -> str:
    found = sandbox.kube.get_object("nodes", node)
    assert found is not None
    return str(found["metadata"]["labels"]["topology.kubernetes.io/zone"])


def _budget(sandbox: Sandbox) -> str:
    configmap = sandbox.kube.get_object("configmaps", "nodecycle-budget", "nodecycle") or {}
    return str((configmap.get("data") or {}).get("budget.json", "{}"))  # shipped empty by deploy/rbac.yaml
