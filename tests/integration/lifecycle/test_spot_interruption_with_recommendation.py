"""A Spot interruption told with its rebalance recommendation, end to end: EC2 sends the recommendation along with
the two-minute warning when it sent none before ("the rebalance recommendation signal can arrive along with the
two-minute interruption notice": EC2 User Guide, rebalance recommendations). Under a RebalancePolicy that cordons
or drains, one node gets three lifecycles at once: the recommendation's, the interruption's and the terminate
hook's (Auto Scaling's, a few seconds after the warning). The node is emptied within the warning, once, no
PodDisruptionBudget breached, and the hook's action completed by nodecycle after the drain."""

from __future__ import annotations

import pytest

from nodecycle.domain.model import Transition
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.group import wait_for
from nodecycle_sandbox.aws.records import TERMINATING
from nodecycle_sandbox.checks import completed_before_drained, last_pod_gone, pdb_breaches
from tests.integration.lifecycle.harness import node_of, records, running

pytestmark = pytest.mark.slow

WARNING_SECONDS = 40.0
HOOK_AFTER = 3.0


def left_its_group(sandbox: Sandbox, instance: str) -> bool:
    """Whether the group no longer lists the instance, as DescribeAutoScalingGroups says; asked only once the
    emulation's record has it terminated (the group drops an instance it terminates, through its hook or at the
    reclaim, and records its end at one moment, under one lock): the wait's seconds are spent on the records over
    the pipe, not on a DescribeAutoScalingGroups every 50 ms (5 ms of CPU each, in this process and the AWS
    process)."""
    ended = any(h.instance_id == instance and h.terminated_at is not None for h in sandbox.aws.instances())
    return ended and instance not in sandbox.asg.instances()


@pytest.mark.parametrize("policy", ["cordon", "drain"])
def test_a_spot_interruption_told_with_its_recommendation_drains_in_time_once(policy: str) -> None:
    # Given a Spot group of two, the stack's RebalancePolicy ``policy``
    with running(size=2, spot=True, parameters={"RebalancePolicy": policy}) as sandbox:
        victim = sorted(sandbox.asg.in_state("InService"))[0]
        node = node_of(sandbox, victim)
        sandbox.kube.reset_history()

        # When EC2 interrupts one instance, telling its rebalance recommendation with the warning
        sandbox.asg.interrupt_spot(victim, warning_seconds=WARNING_SECONDS, hook_after=HOOK_AFTER)
        warned_at = next(
            n.sent_at
            for n in sandbox.aws.notifications()
            if n.payload.get("detail-type") == "EC2 Spot Instance Interruption Warning"
        )
        store = records(sandbox)
        ids = [f"{victim}/{Transition.SPOT_INTERRUPTION.short}", f"{victim}/{Transition.REBALANCE.short}"]
        wait_for(
            lambda: all((r := store.get(i)) and r.finished for i in ids),
            WARNING_SECONDS + 30,
            "the lifecycles",
        )
        wait_for(lambda: left_its_group(sandbox, victim), WARNING_SECONDS + 10, "the reclaim")
        history = sandbox.kube.history()
        actions = sandbox.aws.actions()

    # Then the node was emptied within the warning, no PodDisruptionBudget breached
    emptied = last_pod_gone(history, node)
    assert emptied is not None
    assert emptied - warned_at < WARNING_SECONDS
    assert pdb_breaches(history) == []
    # ...and the terminate hook's action was completed by nodecycle after the drain, not ended by the reclaim
    (hook,) = [a for a in actions if a.instance_id == victim and a.transition == TERMINATING]
    assert hook.outcome == "completed", hook
    assert completed_before_drained(history, actions) == []
