"""Scheduled maintenance drained before it starts, and an instance stopped outside the group's hooks while
nodecycle held things for it: end to end, with Elastic IPs on."""

from __future__ import annotations

import json
import time

import pytest

from nodecycle.domain.model import Transition
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.group import wait_for
from nodecycle_sandbox.checks import last_pod_gone, pdb_breaches
from nodecycle_sandbox.kube import HistoryEntry
from tests.integration.lifecycle.harness import node_of, records, running

pytestmark = pytest.mark.slow

STARTS_IN = 65.0  # the maintenance starts 65 s from now; MaintenanceLeadMinutes=1 drains from 5 s on


def test_maintenance_is_drained_before_it_starts_and_a_stopped_instance_leaves_nothing_behind() -> None:
    parameters = {"MaintenanceLeadMinutes": "1", "EipMode": "allocate"}
    with running(size=3, parameters=parameters) as sandbox:
        scheduled, stopped, _ = sorted(sandbox.asg.in_state("InService"))
        scheduled_node, stopped_node = node_of(sandbox, scheduled), node_of(sandbox, stopped)
        pin(sandbox, stopped_node)
        sandbox.kube.reset_history()
        store = records(sandbox)

        # Given AWS Health's retirement of one instance, 65 s from now
        sandbox.asg.schedule_maintenance([scheduled], starts_in=STARTS_IN)
        starts = time.time() + STARTS_IN - 1  # (Health's times have whole seconds)

        # Then its node is drained before the maintenance starts, under the budget
        maintenance = wait_for(
            lambda: (r := store.get(f"{scheduled}/{Transition.SCHEDULED_CHANGE.short}")) and r.finished and r,
            STARTS_IN - 1,
            "the maintenance drain",
        )
        history = sandbox.kube.history()
        emptied = last_pod_gone(history, scheduled_node)
        assert emptied is not None
        assert emptied < starts
        assert maintenance.updated_at.timestamp() < starts
        assert scheduled_node in holders_seen(history)
        assert pdb_breaches(history) == []

        # Given another instance whose drain for maintenance is held up by a PodDisruptionBudget: it holds a
        # slot, its node is annotated, and it has its Elastic IP
        sandbox.asg.schedule_maintenance([stopped], starts_in=STARTS_IN)
        wait_for(lambda: stopped_node in current_holders(sandbox), 30, "the held-up drain's slot")
        # (the slot is taken a step before the cordon annotates the node)
        wait_for(lambda: nodecycle_annotations(sandbox, stopped_node), 30, "the held-up drain's cordon")
        assert addresses_of(sandbox, stopped)

        # When someone stops the instance outside the group's hooks
        sandbox.client("ec2").stop_instances(InstanceIds=[stopped])

        # Then its slot is freed, its annotations cleared and its address released, at once
        gone = wait_for(
            lambda: (r := store.get(f"{stopped}/{Transition.STATE_CHANGE.short}")) and r.finished and r,
            30,
            "the state change's lifecycle",
        )
        assert gone.outcome == "instance-gone-without-hook"
        wait_for(lambda: not addresses_of(sandbox, stopped), 30, "the address released")
        # ...and it stays so while the held-up drain finds its instance stopped
        time.sleep(5)
        assert stopped_node not in current_holders(sandbox)
        assert nodecycle_annotations(sandbox, stopped_node) == {}
        assert addresses_of(sandbox, stopped) == []


def pin(sandbox: Sandbox, node: str) -> None:
    """A pod on ``node`` whose PodDisruptionBudget never lets it go."""
    sandbox.kube.seed(
        {
            "namespaces": ["pinned"],
            "objects": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "pinned", "namespace": "pinned", "labels": {"app": "pinned"}},
                    "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]},
                },
                {
                    "apiVersion": "policy/v1",
                    "kind": "PodDisruptionBudget",
                    "metadata": {"name": "pinned", "namespace": "pinned"},
                    "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "pinned"}}},
                },
            ],
        }
    )
    sandbox.kube.settle()


def holders_seen(history: list[HistoryEntry]) -> set[str]:
    return {
        h["node"]
        for e in history
        if e.kind == "ConfigMap" and e.name == "nodecycle-budget" and not e.removed
        for h in json.loads((e.object.get("data") or {}).get("budget.json") or "{}").get("holders", [])
    }


def current_holders(sandbox: Sandbox) -> set[str]:
    configmap = sandbox.kube.get_object("configmaps", "nodecycle-budget", "nodecycle") or {}
    document = json.loads((configmap.get("data") or {}).get("budget.json") or "{}")
    return {h["node"] for h in document.get("holders", [])} | {w["node"] for w in document.get("waiters", [])}


def nodecycle_annotations(sandbox: Sandbox, node: str) -> dict[str, str]:
    found = sandbox.kube.get_object("nodes", node) or {}
    present = (found.get("metadata") or {}).get("annotations") or {}
    return {k: v for k, v in present.items() if k.startswith("nodecycle.io/")}


def addresses_of(sandbox: Sandbox, instance: str) -> list[str]:
    """Elastic IPs associated with the instance or tagged for it (allocated, not yet released)."""
    found = sandbox.client("ec2").describe_addresses()["Addresses"]
    return [
        a["PublicIp"]
        for a in found
        if a.get("InstanceId") == instance
        or any(t["Key"] == "nodecycle:instance-id" and t["Value"] == instance for t in a.get("Tags", []))
    ]
