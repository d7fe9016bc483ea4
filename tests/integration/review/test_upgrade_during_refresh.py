"""`sam deploy` of a changed stack while a refresh drains (upgrade_redeploy.py): what the drains in progress, the
actions accepted and the addresses of the stack become under the new parameters. Each test checks the invariants
on what the sandbox recorded (the API server's write history, Auto Scaling's actions, EC2's addresses)."""

from __future__ import annotations

import json
import time

import pytest

from nodecycle.domain.ports.addresses import OWNER_TAG
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.records import TERMINATING
from nodecycle_sandbox.checks import completed_before_drained, released_at, unsettled
from nodecycle_sandbox.faults import Fault
from tests.integration.lifecycle.harness import OWNER, node_of, pin, running, wait_for
from tests.integration.review.upgrade_redeploy import redeploy, redeployable

pytestmark = pytest.mark.slow

SWEEP_GRACE = 600  # SweepGraceSeconds' default


def _holders(sandbox: Sandbox) -> list[str]:
    configmap = sandbox.kube.get_object("configmaps", "nodecycle-budget", "nodecycle") or {}
    budget = json.loads((configmap.get("data") or {}).get("budget.json") or "{}")
    return sorted(h["node"] for h in budget.get("holders") or [])


def _cordoned_at(sandbox: Sandbox, node: str) -> float | None:
    """When ``node`` was first cordoned (the API server's history)."""
    return next(
        (e.time for e in sandbox.kube.history() if e.kind == "Node" and e.name == node and e.unschedulable),
        None,
    )


def test_a_budget_lowered_then_raised_mid_refresh_keeps_the_drains_and_grants_only_under_the_limit() -> None:
    # Given three nodes terminating at once under a budget of 2 (2 per zone): two drains hold a slot, each
    # stuck on a pod its disruption budget keeps, and the third waits, asking again every second
    parameters = {
        "BudgetMaxUnavailable": "2",
        "BudgetMaxUnavailablePerZone": "2",
        "BudgetRetrySeconds": "1",
        "DrainTimeoutSeconds": "600",
    }
    with running(parameters=parameters, size=3, workloads=None) as sandbox, redeployable(sandbox) as retired:
        old = sorted(sandbox.asg.in_state("InService"))
        nodes = {i: node_of(sandbox, i) for i in old}
        for n, instance in enumerate(old):
            pin(sandbox, nodes[instance], namespace=f"pinned-{n}")
        for n, instance in enumerate(old):
            pods = sandbox.kube.objects("pods", f"pinned-{n}")
            assert [(p["spec"]["nodeName"], p["status"]["phase"]) for p in pods] == [
                (nodes[instance], "Running")
            ]
        for instance in old:
            sandbox.asg.terminate(instance)
        wait_for(lambda: len(_holders(sandbox)) == 2, 30, "two drains holding a slot")
        holding = _holders(sandbox)
        (waiting,) = [nodes[i] for i in old if nodes[i] not in holding]
        pinned = {nodes[i]: f"pinned-{n}" for n, i in enumerate(old)}

        # When the stack is deployed again with a budget of 1 while they drain
        redeploy(sandbox, {"BudgetMaxUnavailable": "1", "BudgetMaxUnavailablePerZone": "1"}, retired)
        # Then both keep their slots through renewals on the new containers (a node half drained is disrupted
        # already), and the waiter gets none while one of them still holds: not passed on by the other's release,
        # nor granted when it asks again
        time.sleep(2)  # (renewals on the new containers)
        assert _holders(sandbox) == holding
        sandbox.kube.delete_namespace(pinned[holding[0]])
        wait_for(lambda: holding[0] not in _holders(sandbox), 30, f"{holding[0]}'s drain over")
        assert waiting not in _holders(sandbox), "a slot passed on above the new limit"
        time.sleep(3)  # (the waiter asks again meanwhile)
        assert _holders(sandbox) == [holding[1]], "a slot granted above the new limit"
        assert _cordoned_at(sandbox, waiting) is None

        # When it is deployed again with a budget of 3
        redeploy(sandbox, {"BudgetMaxUnavailable": "3", "BudgetMaxUnavailablePerZone": "3"}, retired)
        # Then the waiter gets its slot beside the drain still holding one
        wait_for(lambda: _holders(sandbox) == sorted([holding[1], waiting]), 30, "the waiter granted under 3")
        for node in (holding[1], waiting):
            sandbox.kube.delete_namespace(pinned[node])
        wait_for(
            lambda: all(
                not a.active for a in sandbox.asg.actions(transition=TERMINATING) if a.instance_id in old
            ),
            30,
            "every terminate action completed",
        )

        history = sandbox.kube.history()
        terminations = [a for a in sandbox.asg.actions(transition=TERMINATING) if a.instance_id in old]
        released = released_at(history, terminations)
        # (the waiter's cordon came after the first slot given back under 1, and before the second)
        cordoned = _cordoned_at(sandbox, waiting) or 0
        assert released[holding[0]] <= cordoned < released[holding[1]]
        assert len(terminations) == 3
        assert unsettled(terminations) == []
        assert completed_before_drained(history, terminations) == []


def test_a_group_no_longer_managed_mid_drain_has_its_accepted_action_drained_and_completed() -> None:
    # Given a node of the group draining, stuck on a pod its disruption budget keeps
    with running(size=2, workloads=None) as sandbox, redeployable(sandbox) as retired:
        instance = sorted(sandbox.asg.in_state("InService"))[0]
        node = node_of(sandbox, instance)
        pin(sandbox, node)
        sandbox.asg.terminate(instance)
        wait_for(lambda: _holders(sandbox) == [node], 30, "the drain holding its slot")

        # When the stack is deployed again with the group moved from its managed groups to its retiring ones
        # (runbook, "Removing a group from a stack": without RetiringGroups the roles lose the completion and
        # the heartbeats of its actions, AccessDenied), and the drain may go on
        redeploy(sandbox, {"ManagedGroups": "other-workers", "RetiringGroups": "nodecycle-workers"}, retired)
        sandbox.kube.delete_namespace("pinned")

        # Then the action accepted before is still drained and completed (invariant 2), not left to the hook's
        # default result (the drain's next poll, on the new containers, finds the node drained at once)
        wait_for(lambda: not _active(sandbox, instance), 10, "the terminate action completed")
        history = sandbox.kube.history()
        (action,) = [a for a in sandbox.asg.actions(transition=TERMINATING) if a.instance_id == instance]
        assert unsettled([action]) == []
        assert completed_before_drained(history, [action]) == []


def _addresses(sandbox: Sandbox) -> dict[str, str | None]:
    """This stack's addresses: allocation id -> the instance it is associated with."""
    found = sandbox.client("ec2").describe_addresses(
        Filters=[{"Name": f"tag:{OWNER_TAG}", "Values": [OWNER]}]
    )
    return {a["AllocationId"]: a.get("InstanceId") for a in found["Addresses"]}


def test_addresses_allocated_before_eips_were_turned_off_are_released_not_leaked() -> None:
    # Given an instance in service with the address its launch allocated (EipMode allocate)
    with (
        running(size=1, workloads=None, parameters={"EipMode": "allocate"}) as sandbox,
        redeployable(sandbox) as retired,
    ):
        (instance,) = sandbox.asg.in_state("InService")
        held = wait_for(
            lambda: {a: i for a, i in _addresses(sandbox).items() if i == instance} or None, 30, "its address"
        )
        (address,) = held

        # When the stack is deployed again with EipMode off, and the instance then terminates
        redeploy(sandbox, {"EipMode": "off"}, retired)
        sandbox.asg.terminate(instance, decrement=True)
        wait_for(
            lambda: all(not a.active for a in sandbox.asg.actions(transition=TERMINATING)),
            30,
            "the terminate action completed",
        )
        (action,) = sandbox.asg.actions(transition=TERMINATING)
        assert unsettled([action]) == []

        # Then the address it leaves behind is this stack's still, and is released by the sweep once the sweep
        # grace has passed (the sweeper's next run made later than that: the sandbox's clock), not leaked
        wait_for(lambda: _addresses(sandbox).get(address, "gone") is None, 30, "the address unassociated")
        sandbox.runner_faults.arm(
            [Fault("late", "time-travel", target="SweeperFunction", value=SWEEP_GRACE + 60, limit=1)], seed=0
        )
        sandbox.runner.fire_schedule("SweeperFunction")
        wait_for(lambda: address not in _addresses(sandbox), 30, "the address released by the sweep")


def test_a_drain_timeout_shortened_mid_drain_keeps_the_drains_deadline_and_applies_the_new_policy_at_it() -> (
    None
):
    # Given a node draining under a 600 s drain timeout (policy force), stuck on a pod its disruption budget keeps
    parameters = {"DrainTimeoutSeconds": "600", "TimeoutPolicy": "force"}
    with running(size=2, workloads=None, parameters=parameters) as sandbox, redeployable(sandbox) as retired:
        instance = sorted(sandbox.asg.in_state("InService"))[0]
        node = node_of(sandbox, instance)
        pin(sandbox, node)
        sandbox.asg.terminate(instance)
        wait_for(lambda: _holders(sandbox) == [node], 30, "the drain holding its slot")

        # When the stack is deployed again with a 1 s drain timeout (below the time it has drained) and the
        # policy continue
        redeploy(sandbox, {"DrainTimeoutSeconds": "1", "TimeoutPolicy": "continue"}, retired)

        # Then the drain keeps the deadline it was given when it began (its record's): its next polls, on the
        # new containers, go on draining
        time.sleep(3)
        assert _holders(sandbox) == [node]
        assert _active(sandbox, instance)
        # and at that deadline (the drain's next invocations made 600 s later: the sandbox's clock) the new
        # policy applies: continue, the pod left on its node, and the action completed before its global timeout
        sandbox.runner_faults.arm([Fault("late", "time-travel", target="DrainFunction", value=600)], seed=0)
        wait_for(lambda: not _active(sandbox, instance), 30, "the terminate action completed")
        sandbox.runner_faults.disarm()
        (action,) = [a for a in sandbox.asg.actions(transition=TERMINATING) if a.instance_id == instance]
        assert unsettled([action]) == []
        assert [p["metadata"]["name"] for p in sandbox.kube.objects("pods", "pinned")] == ["pinned"]


def _active(sandbox: Sandbox, instance: str) -> bool:
    return any(a.active for a in sandbox.asg.actions(transition=TERMINATING) if a.instance_id == instance)
