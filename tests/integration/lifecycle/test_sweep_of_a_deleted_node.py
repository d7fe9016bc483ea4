"""End to end: the sweeper and the slot of a drain whose node object is deleted while its instance runs (``kubectl
delete node``). The pods stay bound to the node's name, running, until the pod garbage collector force-deletes
them after its quarantine (kube-controller-manager pkg/controller/podgc, gcOrphaned), and the drain goes on
evicting them under its slot: the sweep must not hand that slot to the next node meanwhile (invariant 1)."""

from __future__ import annotations

import time

import pytest

from nodecycle_sandbox import Sandbox
from tests.integration.lifecycle.harness import find_record, held_by_a_budget, node_of, running, wait_for

pytestmark = pytest.mark.slow


def cordoned(sandbox: Sandbox, node: str) -> bool:
    return bool(((sandbox.kube.get_object("nodes", node) or {}).get("spec") or {}).get("unschedulable"))


def sweeps(sandbox: Sandbox) -> int:
    return len(sandbox.runner.journal.invocations(function="SweeperFunction"))


def test_a_sweep_leaves_the_slot_of_a_drain_evicting_from_its_deleted_node_to_that_drain() -> None:
    # Given a budget of 1 held by a drain that a PodDisruptionBudget holds up, and another node waiting for it
    parameters = {"BudgetMaxUnavailable": "1", "DrainConcurrency": "2", "BudgetRetrySeconds": "300"}
    with running(parameters=parameters, size=2) as sandbox:
        sandbox.kube.pod_gc_quarantine_seconds = 600.0  # (the deleted node's pods stay bound throughout)
        pod, holder = held_by_a_budget(sandbox)
        waiter = next(i for i in sandbox.asg.in_state("InService") if i != holder)
        holder_node, waiter_node = node_of(sandbox, holder), node_of(sandbox, waiter)
        sandbox.asg.terminate(holder)
        wait_for(lambda: cordoned(sandbox, holder_node), 30, "the holder's node cordoned")
        sandbox.asg.terminate(waiter)
        wait_for(
            lambda: (r := find_record(sandbox, waiter)) is not None and r.slot_waiting_since is not None,
            30,
            "the other node waiting for a slot",
        )

        # When the holder's node object is deleted (kubectl delete node), its instance running and the held pod
        # still bound to the node's name, and the sweeper runs
        sandbox.kube.remove_node(holder_node)
        before = sweeps(sandbox)
        sandbox.runner.fire_schedule("SweeperFunction")
        wait_for(lambda: sweeps(sandbox) > before, 60, "the sweep")
        time.sleep(3)  # (a slot passed on reaches its waiter within a second, through the wake lane)

        # Then the waiter is not cordoned beside it: the slot stays the holder's drain's
        assert sandbox.kube.get_object("pods", pod, "shop") is not None
        assert not cordoned(sandbox, waiter_node)
        record = find_record(sandbox, waiter)
        assert record is not None
        assert record.slot_waiting_since is not None
