"""A node kept cordoned in a Hibernated (or Stopped) warm pool, its instance taken out of the pool before its node went
NotReady: the cordon stays until its kubelet runs again, not lifted as the instance leaves the pool while it still
sleeps (or boots)."""

from __future__ import annotations

import time

import pytest

from nodecycle.domain.launch import KUBELET_RENEW_INTERVAL
from nodecycle.domain.nodes import CLOCK_SKEW
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.group import WarmPoolSpec
from tests.integration.lifecycle.harness import running, wait_for
from tests.integration.lifecycle.test_warm_pool import (
    TAKES_BACK,
    TAKES_BACK_HIBERNATED,
    cordoned,
    last_renewal,
    lease_renewals,
    node_object,
    scaled_in_to_pool,
    wait_launched_from_pool,
)

pytestmark = pytest.mark.slow

# EC2 resumes a hibernated instance in tens of seconds: its kubelet runs again this long after the instance leaves
# the pool, its node still Ready from before the pool meanwhile (the node monitor's grace is not over)
RESUME_SECONDS = 15.0
NODE_MONITOR_GRACE = 60.0
# A kubelet booted out of a Stopped pool renews its Lease at once and posts its node's status (Ready, the new boot's
# id) this long after, once its first runtime check is done (see Controllers.boot_status_lag)
STATUS_LAG = 5.0
BOOT_SECONDS = 3.0


def pool_left_at(sandbox: Sandbox, instance: str) -> float:
    (history,) = [h for h in sandbox.aws.instances() if h.instance_id == instance]
    assert history.pool_left_at, f"{instance} never left the pool"
    return history.pool_left_at[-1]


def uncordoned_at(sandbox: Sandbox, node: str, since: float) -> float:
    """When the node was first written schedulable since ``since``."""
    return next(
        e.time
        for e in sandbox.kube.history()
        if e.kind == "Node"
        and e.name == node
        and e.time >= since
        and not e.removed
        and not e.object["spec"].get("unschedulable")
    )


def posted_on_another_boot(sandbox: Sandbox, node: str, boot: str) -> list[float]:
    """When the node's status was written with a boot id other than ``boot`` (a booted kubelet's posts)."""
    return [
        e.time
        for e in sandbox.kube.history()
        if e.kind == "Node"
        and e.name == node
        and not e.removed
        and e.object["status"].get("nodeInfo", {}).get("bootID") not in (None, boot)
    ]


@pytest.mark.parametrize(
    ("pool", "waits_in"),
    [(TAKES_BACK_HIBERNATED, "Warmed:Hibernated"), (TAKES_BACK, "Warmed:Stopped")],
    ids=["hibernated", "stopped"],
)
def test_a_node_out_of_a_stopped_or_hibernated_pool_within_the_grace_stays_cordoned_until_its_kubelet_runs_again(
    pool: WarmPoolSpec, waits_in: str
) -> None:
    # (kubelets that renew their Leases every second: the last renewal before the pool comes moments before it)
    with running(
        size=3, warm_pool=pool, node_monitor_grace=NODE_MONITOR_GRACE, node_lease_renew=1.0
    ) as sandbox:
        # Given an instance the group scaled in to its hibernated (or stopped) pool, its node drained, kept cordoned
        # and still Ready (the instance asleep for less than the node monitor's grace)
        sandbox.aws.plan_nodes(join_after=RESUME_SECONDS)
        sandbox.asg.set_desired(2)
        instance, _, node, _ = scaled_in_to_pool(sandbox, waits_in)
        assert cordoned(node_object(sandbox, node))

        # When the group scales out again at once (the sandbox stops or hibernates an instance in no time: its
        # kubelet's last renewal moments before the launch), well within the node monitor's grace: the instance leaves
        # the pool (Pending, then Pending:Wait under the launch hook) and resumes RESUME_SECONDS later, asleep until then
        sandbox.asg.set_desired(3)
        wait_launched_from_pool(sandbox, instance)
        wait_for(lambda: not cordoned(node_object(sandbox, node)), 60, "the node uncordoned")
        left = pool_left_at(sandbox, instance)
        wait_for(
            lambda: [t for t in lease_renewals(sandbox, node) if t >= left], 60, "the kubelet running again"
        )

        # Then the cordon was lifted only once the kubelet renewed its Lease after the instance left the pool: not
        # while the node said Ready as the kubelet left it before the pool, pods sent to an instance that sleeps
        lifted = uncordoned_at(sandbox, node, left)
        renewed = [t for t in lease_renewals(sandbox, node) if t >= left]
        assert lifted >= renewed[0], (
            f"uncordoned {lifted - left:.1f} s after the instance left the pool, its kubelet back only "
            f"{renewed[0] - left:.1f} s after"
        )


def test_a_launch_out_of_a_stopped_pool_within_the_grace_completes_once_its_booted_kubelet_posted_its_status() -> (
    None
):
    with running(size=3, warm_pool=TAKES_BACK, node_monitor_grace=NODE_MONITOR_GRACE) as sandbox:
        # Given an instance the group scaled in to its stopped pool, its node drained, kept cordoned and still Ready
        # (stopped for less than the node monitor's grace), whose kubelet, once booted, renews its Lease at once but
        # posts the node's status STATUS_LAG seconds later
        sandbox.asg.set_desired(2)
        instance, _, node, _ = scaled_in_to_pool(sandbox, "Warmed:Stopped")
        before = node_object(sandbox, node)["status"]["nodeInfo"]["bootID"]
        sandbox.kube.set_boot_status_lag(STATUS_LAG, node=node)
        # (stopped longer than a kubelet's renewal interval before the launch, as any stop and start on EC2 takes
        # tens of seconds; the sandbox stops an instance in no time)
        asleep_since = last_renewal(sandbox, node)
        stay = (KUBELET_RENEW_INTERVAL + CLOCK_SKEW).total_seconds() + 2
        wait_for(lambda: time.time() > asleep_since + stay, stay + 5, "a stay in the pool")

        # When the group scales out again, the instance booting BOOT_SECONDS after it leaves the pool
        sandbox.aws.plan_nodes(join_after=BOOT_SECONDS)
        sandbox.asg.set_desired(3)
        back = wait_launched_from_pool(sandbox, instance)

        # Then its launch completed only once the booted kubelet posted the node's status (its new boot id), not at
        # its first Lease renewal, while the node's Ready was still the one from before the stop
        assert (back.outcome, back.result) == ("completed", "CONTINUE")
        assert back.finished_at is not None

        first_post = wait_for(
            lambda: posted_on_another_boot(sandbox, node, before),
            STATUS_LAG + 10,
            "the booted kubelet's status",
        )[0]
        assert back.finished_at >= first_post, (
            f"the launch completed {first_post - back.finished_at:.1f} s before the booted kubelet posted its status"
        )
