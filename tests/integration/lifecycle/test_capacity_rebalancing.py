"""A rebalance recommendation in a Spot group with Capacity Rebalancing on, end to end: Auto Scaling launches a
replacement and, once it is in service, terminates the instance at risk through the terminate hook (Auto Scaling
User Guide, Capacity Rebalancing). Two lifecycles of one node: the recommendation's (its RebalancePolicy) and the
terminate hook's. The node is drained once, under the budget, and the action completed after the drain."""

from __future__ import annotations

import pytest

from nodecycle.domain.model import Transition
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.group import wait_for
from nodecycle_sandbox.aws.records import TERMINATING
from nodecycle_sandbox.checks import completed_before_drained, last_pod_gone, pdb_breaches
from tests.integration.lifecycle.harness import node_of, records, running

pytestmark = pytest.mark.slow


def left_its_group(sandbox: Sandbox, instance: str) -> bool:
    """Whether the group no longer lists the instance, as DescribeAutoScalingGroups says; asked only once the
    emulation's record has it terminated (the group drops an instance it terminates and records its end at one
    moment, under one lock): a drain's tens of seconds are waited out on the records over the pipe, not on a
    DescribeAutoScalingGroups every 50 ms (5 ms of CPU each, in this process and the AWS process)."""
    ended = any(h.instance_id == instance and h.terminated_at is not None for h in sandbox.aws.instances())
    return ended and instance not in sandbox.asg.instances()


@pytest.mark.parametrize("policy", ["cordon", "drain"])
def test_a_rebalance_recommendation_under_capacity_rebalancing_drains_once_and_completes_after(
    policy: str,
) -> None:
    # Given a Spot group of two with Capacity Rebalancing on, the stack's RebalancePolicy ``policy``
    with running(
        size=2, spot=True, capacity_rebalance=True, parameters={"RebalancePolicy": policy}
    ) as sandbox:
        at_risk = sorted(sandbox.asg.in_state("InService"))[0]
        node = node_of(sandbox, at_risk)
        sandbox.kube.reset_history()

        # When EC2 recommends rebalancing one instance
        sandbox.asg.recommend_rebalance(at_risk)

        # Then Auto Scaling's replacement goes in service, and the instance at risk leaves through its hook
        wait_for(lambda: left_its_group(sandbox, at_risk), 90, "the instance at risk terminated")
        sandbox.asg.wait_in_service(2, timeout=60)  # (the replacement; a group of two)
        store = records(sandbox)
        actions = sandbox.aws.actions()
        (hook,) = [a for a in actions if a.instance_id == at_risk and a.transition == TERMINATING]
        hook_id = f"{at_risk}/{Transition.TERMINATING.short}/{hook.token}"
        finished = wait_for(
            lambda: (r := store.get(hook_id)) and r.finished and r, 60, "the terminate lifecycle over"
        )
        rebalance = wait_for(
            lambda: (r := store.get(f"{at_risk}/{Transition.REBALANCE.short}")) and r.finished and r,
            60,
            "the rebalance lifecycle over",
        )
        history = sandbox.kube.history()

    # ...completed by nodecycle once its node was drained (not by its timeout), with no PodDisruptionBudget breached
    assert hook.outcome == "completed", hook
    assert finished.outcome is not None
    assert "timeout" not in finished.outcome, finished.outcome
    assert rebalance.outcome is None or "timeout" not in rebalance.outcome, rebalance.outcome
    assert last_pod_gone(history, node) is not None
    assert completed_before_drained(history, actions) == []
    assert pdb_breaches(history) == []
