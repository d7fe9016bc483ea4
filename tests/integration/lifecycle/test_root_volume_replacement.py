"""An instance refresh that replaces root volumes (strategy ReplaceRootVolume) end to end. Each instance is held by
the group's terminating hooks in ReplacingRootVolume:Wait (its event: EC2_INSTANCE_TERMINATING, Origin and
Destination "AutoScalingGroup", Action "ReplaceRootVolume"), reboots on its new volume once they let it go, and comes
back through the launching hooks (Pending:Wait) under the same node object ("Use lifecycle hooks with replace root
volume", Amazon EC2 Auto Scaling user guide). Its node is drained before the reboot, keeps its Elastic IP (the
instance keeps its network interfaces), and is uncordoned once the instance is back in service."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest

from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.control import SANDBOX_ACCOUNT
from nodecycle_sandbox.aws.group import GroupSpec, HookSpec
from nodecycle_sandbox.aws.lifecycle import ROOT_VOLUME_REBOOT_SECONDS
from nodecycle_sandbox.aws.records import (
    LAUNCHING,
    REPLACE_ROOT_VOLUME,
    TERMINATING,
    ActionRecord,
    RefreshTimeline,
)
from nodecycle_sandbox.checks import completed_before_drained, pdb_breaches
from tests.integration.lifecycle.harness import WORKLOADS, find_record, node_of, running, wait_for
from tests.integration.lifecycle.test_warm_pool import addresses_of, cordoned, node_object, ready

pytestmark = pytest.mark.slow

# The terminate hook's timeout, short: an action nobody completes lets the replacement go on at its default CONTINUE
# within the test's time, the node undrained
HOOK_TIMEOUT = 30
HOOKS = (
    HookSpec("nodecycle-launch", LAUNCHING, 120, "ABANDON"),
    HookSpec("nodecycle-terminate", TERMINATING, HOOK_TIMEOUT, "CONTINUE"),
)


# How long TERMINATE_ONLY_GROUP's first instance takes to boot from its new root volume: longer than the cleanup's
# watch takes between two looks (12 drain polls of 1 s), and shorter than the node monitor's grace (40 s), through
# which the node stays Ready as the old kubelet left it
SLOW_BOOT_SECONDS = 20.0
# How long the instances of the groups with a launch hook take to boot from their new root volumes: several of the
# gate's polls (1 s) past the launch action's start, which a gate taking the Ready left from before the reboot
# completes at its first look, and shorter than the node monitor's grace (40 s). (SLOW_BOOT_SECONDS for them too
# were each refresh's two boots 20 s more, the fixture's time.)
LAUNCH_BOOT_SECONDS = 10.0
# How long TERMINATE_ONLY_GROUP's second instance takes to boot from its new root volume: its rebooted kubelet's
# Lease, renewed BOOT_STATUS_LAG_SECONDS before its status, tells it from the one before, not its boot's length
LEASE_FIRST_BOOT_SECONDS = 3.0
# How long after its instance booted from the new root volume TOLD_GROUP's second kubelet first posts its node's
# status, its Lease renewed from the boot on: shorter than the node monitor's grace (40 s), through which the node
# stays Ready as the old kubelet left it (a renewed Lease keeps it so), and longer than the gate's polls (1 s)
STATUS_LAG_SECONDS = 8.0
# How long TERMINATE_ONLY_GROUP's second rebooted kubelet renews its Lease before it first posts its node's status
BOOT_STATUS_LAG_SECONDS = 30.0
# The groups the stack manages: the sandbox's, whose hooks' events go to EventBridge (Origin and Destination told);
# one whose hooks notify the intake queue; one with nodecycle's terminate hook only (no launch hook: no readiness gate
# holds the instance once its volume is replaced)
TOLD_GROUP = GroupSpec.name
QUEUE_GROUP = "nodecycle-queue-workers"
TERMINATE_ONLY_GROUP = "nodecycle-terminate-only-workers"


class Group(NamedTuple):
    timeline: RefreshTimeline
    instances: list[str]  # sorted
    addresses: dict[str, list[str]]  # instance -> its Elastic IPs before the refresh
    nodes: dict[str, str]  # instance -> its node
    booted: dict[str, str]  # node -> its boot id before the refresh


class Refreshed(NamedTuple):
    sandbox: Sandbox
    groups: dict[str, Group]  # by name


@pytest.fixture(scope="module")
def refreshed() -> Iterator[Refreshed]:
    """Three groups of two instances, the workloads spread over their six nodes, whose instances boot from their new
    root volumes in 10 s (TERMINATE_ONLY_GROUP's in 20 s and 3 s). TOLD_GROUP, under nodecycle's launch and terminate hooks told by EventBridge, its instances
    with Elastic IPs: its second kubelet, booted again, renews its Lease at once but posts its node's status 8 s later
    (the kubelet runs its Lease controller beside its status loop: kubelet.go, Kubelet.Run), the first both at once.
    QUEUE_GROUP, under the same hooks notifying the intake queue, their notifications without Origin and Destination
    (as AWS's SQS message example shows them), nothing sent to EventBridge; its instances with Elastic IPs.
    TERMINATE_ONLY_GROUP, under nodecycle's terminate hook only: its second kubelet renews its Lease 30 s before it
    first posts its node's status, the first both at once. An instance refresh in each group replaced their root
    volumes, one at a time, the three refreshes at once (a drain of each group at once: the budget allows three in
    the cluster and in a zone). One sandbox for the five tests below (three sandboxes, one refresh after the other,
    were two sandboxes' starts and two refreshes' time more)."""
    parameters = {
        "EipMode": "allocate",
        "ManagedGroups": f"{TOLD_GROUP},{QUEUE_GROUP},{TERMINATE_ONLY_GROUP}",
        "BudgetMaxUnavailable": "3",
        "BudgetMaxUnavailablePerZone": "3",
    }
    terminate_only = (HookSpec("nodecycle-terminate", TERMINATING, HOOK_TIMEOUT, "CONTINUE"),)
    with running(size=2, hooks=HOOKS, parameters=parameters, workloads=None) as sandbox:
        groups = (
            sandbox.asg,
            sandbox.add_group(GroupSpec(name=QUEUE_GROUP, size=2, hooks=HOOKS)),
            sandbox.add_group(GroupSpec(name=TERMINATE_ONLY_GROUP, size=2, hooks=terminate_only)),
        )
        instances = {group.name: sorted(group.wait_in_service(2, timeout=90)) for group in groups}
        # (TERMINATE_ONLY_GROUP's in service before their nodes join: no launch hook waits for them)
        for instance in instances[TERMINATE_ONLY_GROUP]:
            wait_for(functools.partial(joined, sandbox, instance), 60, f"the node of {instance}")
        sandbox.kube.seed(dict(WORKLOADS))
        sandbox.kube.settle(timeout=30)
        terminate_only_instances = instances[TERMINATE_ONLY_GROUP]
        sandbox.aws.configure(
            root_volume_boot_seconds=LAUNCH_BOOT_SECONDS,
            root_volume_boot_seconds_of={
                terminate_only_instances[0]: SLOW_BOOT_SECONDS,
                terminate_only_instances[1]: LEASE_FIRST_BOOT_SECONDS,
            },
            eventbridge_for_sqs_hooks=False,
            notifications_tell_origin=False,
        )
        queue = sandbox.runner.queue("IntakeQueue").arn
        for hook in HOOKS:
            sandbox.client("autoscaling").put_lifecycle_hook(
                AutoScalingGroupName=QUEUE_GROUP,
                LifecycleHookName=hook.name,
                LifecycleTransition=hook.transition,
                HeartbeatTimeout=hook.heartbeat_timeout,
                DefaultResult=hook.default_result,
                NotificationTargetARN=queue,
                RoleARN=f"arn:aws:iam::{SANDBOX_ACCOUNT}:role/nodecycle-HookNotificationRole",
            )
        addresses = {
            name: {instance: addresses_of(sandbox, instance) for instance in found}
            for name, found in instances.items()
        }
        assert all(addresses[TOLD_GROUP].values())
        assert all(addresses[QUEUE_GROUP].values())
        nodes = {name: {i: node_of(sandbox, i) for i in found} for name, found in instances.items()}
        booted = {
            name: {node: boot_id(node_object(sandbox, node)) for node in found.values()}
            for name, found in nodes.items()
        }
        sandbox.kube.set_boot_status_lag(STATUS_LAG_SECONDS, node=nodes[TOLD_GROUP][instances[TOLD_GROUP][1]])
        sandbox.kube.set_boot_status_lag(
            BOOT_STATUS_LAG_SECONDS, node=nodes[TERMINATE_ONLY_GROUP][instances[TERMINATE_ONLY_GROUP][1]]
        )
        sandbox.kube.reset_history()

        refreshes = {
            group.name: group.start_refresh(min_healthy_percentage=50, strategy=REPLACE_ROOT_VOLUME)
            for group in groups
        }
        timelines = {group.name: group.wait_refresh(refreshes[group.name], timeout=240) for group in groups}
        yield Refreshed(
            sandbox,
            {
                name: Group(timelines[name], instances[name], addresses[name], nodes[name], booted[name])
                for name in instances
            },
        )


def held_by_the_terminate_hook(sandbox: Sandbox, group: str) -> list[ActionRecord]:
    """The terminate hook's actions of ``group``'s root volume replacements."""
    return [
        a
        for a in sandbox.aws.actions()
        if a.group == group and a.transition == TERMINATING and a.action == REPLACE_ROOT_VOLUME
    ]


def test_a_root_volume_replacement_drains_the_node_first_keeps_its_address_and_uncordons_it_once_back(
    refreshed: Refreshed,
) -> None:
    # Given two instances with Elastic IPs, their hooks' actions told by EventBridge (the fixture's TOLD_GROUP)
    # When an instance refresh replaces the root volumes of both instances, one at a time (the fixture)
    sandbox, group = refreshed.sandbox, refreshed.groups[TOLD_GROUP]
    timeline, instances, nodes = group.timeline, group.instances, group.nodes

    # Then the same instances are back in service, each replaced once
    assert timeline.status == "Successful"
    assert sorted(sandbox.asg.in_state("InService")) == instances
    assert all(len(timeline.instances[i].root_volume_replaced_at) == 1 for i in instances)

    # And nodecycle completed each terminate hook's action (not its timeout) once its node was drained, through
    # the Eviction API under the PodDisruptionBudgets
    held = held_by_the_terminate_hook(sandbox, TOLD_GROUP)
    assert sorted(a.instance_id for a in held) == instances
    assert [(a.outcome, a.result) for a in held] == [("completed", "CONTINUE")] * 2
    history = sandbox.kube.history()
    assert completed_before_drained(history, held) == []
    assert pdb_breaches(history) == []
    assert {e.name for e in history if e.resource == "pods/eviction"} != set()

    # And each instance kept its Elastic IP: its network interfaces stay with it through the replacement
    assert {instance: addresses_of(sandbox, instance) for instance in instances} == group.addresses

    # And each launch action after a replacement was completed once the rebooted kubelet ran, not on the node's
    # Ready condition left from before the reboot
    launched_back_after_the_reboot(sandbox, timeline, instances)

    # And each node, the same object all along, is schedulable and Ready again once its instance is back, the
    # lifecycle that drained it over
    for instance in instances:
        uncordoned_again(sandbox, nodes[instance])
        record = drained_for(sandbox, instance)
        assert record.step is Step.DONE
        assert record.outcome == "drained"


def launched_back_after_the_reboot(sandbox: Sandbox, timeline: RefreshTimeline, instances: list[str]) -> None:
    """Each of ``instances``' launch action after its root volume replacement was completed, once the rebooted
    kubelet ran (LAUNCH_BOOT_SECONDS after the replacement is done)."""
    for instance in instances:
        (replaced_at,) = timeline.instances[instance].root_volume_replaced_at
        back_at = replaced_at + ROOT_VOLUME_REBOOT_SECONDS + LAUNCH_BOOT_SECONDS
        (launch,) = [
            a
            for a in sandbox.aws.actions()
            if a.instance_id == instance and a.transition == LAUNCHING and a.started_at > replaced_at
        ]
        assert (launch.outcome, launch.result) == ("completed", "CONTINUE")
        assert launch.finished_at is not None
        assert launch.finished_at >= back_at


def test_a_launch_back_from_a_root_volume_replacement_waits_for_the_rebooted_kubelets_status_not_its_lease(
    refreshed: Refreshed,
) -> None:
    # Given the instance whose kubelet, booted again, renews its Lease at once but posts its node's status 8 s later,
    # its root volume replaced by an instance refresh (the fixture's TOLD_GROUP)
    sandbox, group = refreshed.sandbox, refreshed.groups[TOLD_GROUP]
    timeline, instance = group.timeline, group.instances[1]
    node = group.nodes[instance]
    assert timeline.status == "Successful"

    # Then its launch action after the replacement was completed once the rebooted kubelet had posted its status (a
    # new bootID), not on the Ready left from before the reboot once the new kubelet renewed the Lease
    (replaced_at,) = timeline.instances[instance].root_volume_replaced_at
    posted = [
        e.time
        for e in sandbox.kube.history()
        if e.resource.startswith("nodes") and e.name == node and not e.removed
        if boot_id(e.object) != group.booted[node]
    ]
    assert posted, f"node {node} never posted a new boot id"
    (launch,) = [
        a
        for a in sandbox.aws.actions()
        if a.instance_id == instance and a.transition == LAUNCHING and a.started_at > replaced_at
    ]
    assert (launch.outcome, launch.result) == ("completed", "CONTINUE")
    assert launch.finished_at is not None
    assert launch.finished_at >= min(posted), (
        f"the launch of {instance} completed {min(posted) - launch.finished_at:.1f} s before its rebooted "
        "kubelet posted its status"
    )


# How far behind the sandbox's clock (Auto Scaling's) the rebooted kubelets of the test below stamp what they post
KUBELET_CLOCK_BEHIND_SECONDS = 3.0


def test_a_launch_back_from_a_root_volume_replacement_takes_the_status_of_a_kubelet_whose_clock_runs_behind() -> (
    None
):
    # (one instance: a second, replaced after it, was the same case again and half the test's time)
    with running(
        size=1, hooks=HOOKS, parameters={"ReadinessTimeoutSeconds": "30"}, workloads=None
    ) as sandbox:
        # Given a kubelet whose clock runs 3 s behind Auto Scaling's, which posts its node's status (the new boot's id,
        # a Ready heartbeat by its clock) as its instance is back from its root volume replacement, before the
        # readiness gate's first look, and then not again within the readiness timeout (a kubelet re-posts an unchanged
        # status every 5 minutes: nodeStatusReportFrequency)
        sandbox.aws.configure(root_volume_boot_seconds=0)
        sandbox.kube.set_status_report_seconds(None)
        instances = sorted(sandbox.asg.in_state("InService"))
        for instance in instances:
            sandbox.kube.set_kubelet_clock_offset(
                -KUBELET_CLOCK_BEHIND_SECONDS, node=node_of(sandbox, instance)
            )

        # When an instance refresh replaces its root volume
        refresh = sandbox.asg.start_refresh(min_healthy_percentage=0, strategy=REPLACE_ROOT_VOLUME)
        timeline = sandbox.asg.wait_refresh(refresh, timeout=240)

        # Then the launch action after the replacement was completed with CONTINUE once the rebooted kubelet ran (its
        # heartbeat read by the kubelet's clock), not left to the readiness timeout and abandoned: the same instance
        # in service again
        for instance in instances:
            (replaced_at,) = timeline.instances[instance].root_volume_replaced_at
            (launch,) = [
                a
                for a in sandbox.aws.actions()
                if a.instance_id == instance and a.transition == LAUNCHING and a.started_at > replaced_at
            ]
            assert (launch.outcome, launch.result) == ("completed", "CONTINUE"), instance
        assert timeline.status == "Successful"
        assert sorted(sandbox.asg.in_state("InService")) == instances


def uncordoned_again(sandbox: Sandbox, node: str, *, within: float = 60) -> None:
    wait_for(
        lambda: not cordoned(node_object(sandbox, node)) and ready(node_object(sandbox, node)),
        within,
        f"node {node} uncordoned after the root volume replacement",
    )


def drained_for(sandbox: Sandbox, instance: str) -> LifecycleRecord:
    """The lifecycle of the terminate hook's action of ``instance``, finished."""
    return wait_for(
        lambda: (r := find_record(sandbox, instance)) is not None and r.finished and r,
        30,
        f"the lifecycle that drained the node of {instance}",
    )


def test_a_root_volume_replacement_notified_by_a_queue_without_origin_is_drained_and_keeps_its_address(
    refreshed: Refreshed,
) -> None:
    # Given two instances with Elastic IPs, their group's hooks notifying the intake queue, their notifications
    # without Origin and Destination, and nothing sent to EventBridge (the fixture's QUEUE_GROUP)
    # When an instance refresh replaces their root volumes, one at a time (the fixture)
    sandbox, group = refreshed.sandbox, refreshed.groups[QUEUE_GROUP]
    timeline, instances = group.timeline, group.instances
    assert timeline.status == "Successful"

    # Then nodecycle completed each terminate hook's action once its node was drained (not at its timeout, the
    # node undrained), and each instance kept its Elastic IP
    held = held_by_the_terminate_hook(sandbox, QUEUE_GROUP)
    assert sorted(a.instance_id for a in held) == instances
    assert [(a.outcome, a.result) for a in held] == [("completed", "CONTINUE")] * 2
    assert completed_before_drained(sandbox.kube.history(), held) == []
    assert {instance: addresses_of(sandbox, instance) for instance in instances} == group.addresses
    for instance in instances:
        record = drained_for(sandbox, instance)
        assert record.replaces_root_volume
        assert record.outcome == "drained"

    # And each launch action after a replacement (told without Origin either: the state, Pending:Wait, cannot
    # tell it from a new instance's) was completed once the rebooted kubelet ran
    launched_back_after_the_reboot(sandbox, timeline, instances)


def test_without_a_launch_hook_a_node_is_uncordoned_only_once_the_rebooted_kubelet_posted_its_status(
    refreshed: Refreshed,
) -> None:
    # Given the instance whose rebooted kubelet posts its node's status as it renews its Lease, its root volume
    # replaced by an instance refresh (the fixture's TERMINATE_ONLY_GROUP)
    sandbox, group = refreshed.sandbox, refreshed.groups[TERMINATE_ONLY_GROUP]
    node = group.nodes[group.instances[0]]
    uncordoned_again(sandbox, node)
    back = functools.partial(booted_again, sandbox, node, group.booted[node])
    wait_for(back, 2 * SLOW_BOOT_SECONDS, f"the rebooted kubelet of node {node}")

    # Then its node was uncordoned once its rebooted kubelet had posted its status (a new bootID, Ready), not on the
    # Ready condition its kubelet left before the reboot, in service again moments after the replacement
    assert_uncordoned_once_booted(sandbox, node, group.booted[node])


def test_without_a_launch_hook_a_node_is_uncordoned_only_once_its_rebooted_kubelet_posted_not_on_its_lease(
    refreshed: Refreshed,
) -> None:
    # Given the instance whose rebooted kubelet renews its Lease 30 s before it first posts its node's status, its
    # root volume replaced by an instance refresh (the fixture's TERMINATE_ONLY_GROUP)
    sandbox, group = refreshed.sandbox, refreshed.groups[TERMINATE_ONLY_GROUP]
    node = group.nodes[group.instances[1]]
    uncordoned_again(sandbox, node, within=60 + BOOT_STATUS_LAG_SECONDS)
    back = functools.partial(booted_again, sandbox, node, group.booted[node])
    wait_for(back, 2 * SLOW_BOOT_SECONDS + BOOT_STATUS_LAG_SECONDS, f"the rebooted kubelet of node {node}")

    # Then its node was uncordoned once its rebooted kubelet had posted its status, not on its renewed Lease
    assert_uncordoned_once_booted(sandbox, node, group.booted[node])


def assert_uncordoned_once_booted(sandbox: Sandbox, node: str, booted: str) -> None:
    """The node's first uncordon after its cordon came no earlier than the first write of a new boot id."""
    writes = [
        e
        for e in sandbox.kube.history()
        if e.resource.startswith("nodes") and e.name == node and not e.removed
    ]
    back_at = min(e.time for e in writes if boot_id(e.object) != booted)
    cordoned_at = min(e.time for e in writes if cordoned(e.object))
    uncordoned_at = min(e.time for e in writes if e.time > cordoned_at and not cordoned(e.object))
    assert uncordoned_at >= back_at, (
        f"node {node} uncordoned {back_at - uncordoned_at:.1f} s before its kubelet ran"
    )


def joined(sandbox: Sandbox, instance: str) -> bool:
    node = sandbox.kube.node_for_instance(instance)
    return node is not None and ready(node_object(sandbox, node))


def booted_again(sandbox: Sandbox, node: str, before: str) -> bool:
    return boot_id(node_object(sandbox, node)) != before


def boot_id(node: dict[str, Any]) -> str:
    return str(((node.get("status") or {}).get("nodeInfo") or {}).get("bootID"))
