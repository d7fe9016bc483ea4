"""Scheduled maintenance drained before it starts, and an instance stopped outside the group's hooks while
nodecycle held things for it: end to end, with Elastic IPs on. A node drained for EC2's scheduled reboot is kept
cordoned through the reboot itself: EC2 lists the event completed while the instance still boots, and the node stays
Ready as the old kubelet left it until the node monitor's grace is over; the cordon is lifted only once the rebooted
kubelet posts the node's status (a new boot id), not on that stale Ready."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, NamedTuple

import pytest

from nodecycle.domain.model import LifecycleRecord, Step, Transition
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.group import wait_for
from nodecycle_sandbox.aws.lifecycle import BOOT_SECONDS
from nodecycle_sandbox.aws.records import TERMINATING
from nodecycle_sandbox.checks import last_pod_gone, pdb_breaches
from nodecycle_sandbox.kube import HistoryEntry
from tests.integration.lifecycle.harness import (
    node_of,
    pin,
    records,
    running,
    wait_finished,
    wait_terminated,
)

pytestmark = pytest.mark.slow

# The maintenance starts 62 s from now: MaintenanceLeadMinutes=1 drains from 2 s on. (It was 65 s, the drain from
# 5 s on: three tests waited out those 3 s four times, and nothing here needs the drain to start later.)
STARTS_IN = 62.0
# A reboot 12 s from now: MaintenanceLeadMinutes=1 drains at once (in 3 s on two loaded cores); the test then
# waits for the reboot's start, so this is as short as the drain allows
REBOOT_IN = 12.0
HELD = "held"  # the namespace of the pod whose PodDisruptionBudget holds up a drain
LATER_IN = 3600.0  # a second maintenance of the same instance, an hour from now: drained 59 minutes on
# How long the reboot of the test of the stale Ready keeps the kubelet away: longer than two of the watch's looks (12
# drain polls of 1 s), shorter than the node monitor's grace (40 s), so that the node says Ready, as the old kubelet
# left it, all through the reboot: each look of the watch meanwhile finds the reboot listed completed and the node Ready
STALE_READY_BOOT_SECONDS = 30.0


class MinuteLead(NamedTuple):
    sandbox: Sandbox
    instances: list[str]  # in service when the sandbox started, sorted: each test's are its own


@pytest.fixture(scope="module")
def minute_lead() -> Iterator[MinuteLead]:
    """Seven instances in service, maintenance drained a minute before it starts, Elastic IPs on: the sandbox of the
    tests that need nothing else, each on instances of its own, named when the sandbox started (a sandbox each was
    a sandbox's start more each: the test of the stale Ready had a file and a sandbox of its own, the test of the
    terminate hook after a maintenance drain a sandbox of its own). The test that stops an instance runs last: it
    leaves that instance's node and pods to a kubelet that is gone."""
    # (a budget of three in the cluster and in a zone: the drains of the two reboots at once, of the terminate
    # hook's held-up drain and of the stop's held-up drain never wait in line for each other's slots)
    parameters = {
        "MaintenanceLeadMinutes": "1",
        "EipMode": "allocate",
        "BudgetMaxUnavailable": "3",
        "BudgetMaxUnavailablePerZone": "3",
    }
    with running(size=7, parameters=parameters) as sandbox:
        yield MinuteLead(sandbox, sorted(sandbox.asg.in_state("InService")))


def test_a_health_update_of_a_maintenance_drained_for_does_not_pull_back_the_one_that_follows_it(
    minute_lead: MinuteLead,
) -> None:
    # (the module's sandbox: this test's instance is its first)
    sandbox, instance = minute_lead.sandbox, minute_lead.instances[0]
    node = node_of(sandbox, instance)
    store = records(sandbox)

    # Given an instance with a reboot in 62 s and a retirement in an hour, its node drained for the
    # reboot, and the retirement's lifecycle now waiting on the record for its own lead time
    reboot = schedule_two_maintenances(sandbox, instance)
    following = wait_for_the_second(sandbox, instance)
    sandbox.kube.reset_history()

    # When AWS Health updates the reboot's event (a new event id, the same start), while EC2 lists both
    update = {**reboot, "id": "0c9b8a7d-6e5f-4a3b-9c2d-1e0f9a8b7c6d", "time": _now()}
    sandbox.publish(update)
    # (once intake has taken it, however late that is: a fixed 8 s here could pass on a loaded machine before
    # intake ran, and the test then proved nothing; then a few drain polls for any work it would have sent)
    wait_for(lambda: handled(sandbox, update["id"]), 60, "intake's handling of the update")
    time.sleep(3)

    # Then the retirement's lifecycle is left as it was: not pulled back to the reboot, and the node,
    # drained for that reboot already, is not drained for it again
    record = store.get(f"{instance}/{Transition.SCHEDULED_CHANGE.short}")
    assert record is not None
    assert (record.token, record.global_deadline, record.step) == (
        following.token,
        following.global_deadline,
        following.step,
    )
    assert node not in holders_seen(sandbox.kube.history())


def test_a_terminate_hook_after_a_maintenance_drain_completes_at_once_while_the_next_one_waits(
    minute_lead: MinuteLead,
) -> None:
    # (the module's sandbox: this test's instances are its sixth and seventh, both scaled in)
    sandbox, (instance, held) = minute_lead.sandbox, minute_lead.instances[5:7]
    node, held_node = node_of(sandbox, instance), node_of(sandbox, held)
    store = records(sandbox)

    # Given an instance with a reboot in 62 s and a retirement in an hour, its node drained (cordoned,
    # empty) for the reboot, and the retirement's lifecycle now waiting on the record for its lead time
    schedule_two_maintenances(sandbox, instance)
    wait_for_the_second(sandbox, instance)
    # ...and a slot of the budget held by another node's drain (its scale-in), which a PodDisruptionBudget holds
    # up: a lifecycle that asked for one would be seen holding it, or waiting in line behind it
    pin(sandbox, held_node, namespace=HELD)
    sandbox.asg.terminate(held, decrement=True)
    try:
        wait_for(lambda: nodecycle_annotations(sandbox, held_node), 30, "the held-up drain's slot and cordon")
        sandbox.kube.reset_history()

        # When the group scales in that instance (its terminate hook)
        sandbox.asg.terminate(instance, decrement=True)

        # Then its action is completed at once, without asking for a slot: the node was drained already
        hook = wait_for(
            lambda: next(
                (
                    a
                    for a in sandbox.asg.actions(transition=TERMINATING)
                    if a.instance_id == instance and a.outcome
                ),
                None,
            ),
            30,
            "the terminate hook's completion",
        )
        assert hook.outcome == "completed"
        record = store.get(f"{instance}/{Transition.TERMINATING.short}/{hook.token}")
        assert record is not None
        assert record.outcome == "drained-by:scheduled-change"
        assert node not in holders_seen(sandbox.kube.history())
    finally:
        # (the held-up drain let go, its slot given back before the next test's drains ask for one)
        sandbox.kube.delete_namespace(HELD)
        wait_terminated(sandbox, held)
        wait_finished(sandbox, held)


class Reboots(NamedTuple):
    """EC2's system reboots of two instances, their nodes drained for them, carried out at once (see ``reboots``)."""

    sandbox: Sandbox
    back: str  # the instance whose kubelet was away for 3 s
    kept_cordoned: bool  # whether its node was still cordoned as the reboot came
    stale: str  # the instance whose kubelet was away for STALE_READY_BOOT_SECONDS
    stale_booted_before: str | None  # its node's boot id before the reboot


@pytest.fixture(scope="module")
def reboots(minute_lead: MinuteLead) -> Reboots:
    """The module's second and fifth instances, each with EC2's system reboot 12 s from now, their nodes drained
    (cordoned, empty) for them; in the reboots' window, EC2 lists both events completed, the second's kubelet gone
    for 3 s, the fifth's for STALE_READY_BOOT_SECONDS. Both reboots at once: one after the other, the tests waited
    out two drains' lead times and two reboots."""
    sandbox, back, stale = minute_lead.sandbox, minute_lead.instances[1], minute_lead.instances[4]
    back_node, stale_node = node_of(sandbox, back), node_of(sandbox, stale)
    stale_booted_before = boot_id(node_object(sandbox, stale_node))

    for instance in (back, stale):
        sandbox.asg.schedule_maintenance([instance], code="system-reboot", starts_in=REBOOT_IN)
    starts = time.time() + REBOOT_IN
    wait_for(
        lambda: drained_for_the_reboot(sandbox, back) and back_node not in current_holders(sandbox),
        REBOOT_IN,
        "the reboot's drain, its slot given back",
    )
    wait_for(
        lambda: drained_for_the_reboot(sandbox, stale),
        max(0.0, starts + 30 - time.time()),
        "the reboot's drain",
    )

    time.sleep(max(0.0, starts - time.time()))
    kept_cordoned = cordoned(sandbox, back_node)  # (while the reboot could still come)
    sandbox.kube.reset_history()
    sandbox.aws.configure(boot_seconds=STALE_READY_BOOT_SECONDS)
    try:
        sandbox.asg.end_maintenance([stale])
    finally:
        sandbox.aws.configure(boot_seconds=BOOT_SECONDS)
    sandbox.kube.kill_kubelet(back_node, grace_seconds=0)
    sandbox.asg.end_maintenance([back])
    time.sleep(3)
    sandbox.kube.revive_kubelet(back_node)
    return Reboots(sandbox, back, kept_cordoned, stale, stale_booted_before)


def drained_for_the_reboot(sandbox: Sandbox, instance: str) -> bool:
    """Whether the node of ``instance`` is drained (cordoned, empty) for its maintenance, the lifecycle in its
    cleanup."""
    record = records(sandbox).get(f"{instance}/{Transition.SCHEDULED_CHANGE.short}")
    return bool(
        record
        and record.drain_started_at is not None
        and record.step in (Step.CLEANUP, Step.DONE)
        and cordoned(sandbox, node_of(sandbox, instance))
    )


def test_a_node_drained_for_a_reboot_is_uncordoned_once_the_reboot_is_over_and_its_instance_stayed(
    reboots: Reboots,
) -> None:
    # Given EC2's system reboot of one instance 12 s on, its node drained (cordoned, empty) for it (the fixture's)
    # When EC2 reboots it in its window (its kubelet gone for a few seconds), and lists the event completed
    sandbox, instance = reboots.sandbox, reboots.back
    node = node_of(sandbox, instance)
    store = records(sandbox)
    assert reboots.kept_cordoned  # kept while the reboot could still come

    # Then the node, Ready again on the instance still in service, is uncordoned: no capacity is lost to
    # a maintenance that is over, and the lifecycle is done
    wait_for(lambda: not cordoned(sandbox, node), 90, "the node uncordoned after the reboot")
    assert instance in sandbox.asg.in_state("InService")
    wait_for(
        lambda: (r := store.get(f"{instance}/{Transition.SCHEDULED_CHANGE.short}")) and r.finished,
        30,
        "the maintenance's lifecycle over",
    )
    assert nodecycle_annotations(sandbox, node) == {}


def test_a_node_drained_for_a_reboot_stays_cordoned_until_its_kubelet_is_back_from_the_reboot(
    reboots: Reboots,
) -> None:
    # Given EC2's system reboot of one instance 12 s on, its node drained (cordoned, empty) for it (the fixture's)
    # When EC2 reboots it in its window, listing the event completed at once, its kubelet away for 30 s
    sandbox, instance = reboots.sandbox, reboots.stale
    node = node_of(sandbox, instance)
    store = records(sandbox)

    # Then the node is uncordoned, but only once the rebooted kubelet has posted its status (its new boot id): on the
    # Ready left from before the reboot, pods were sent to a node whose kubelet was not running
    wait_for(lambda: not cordoned(sandbox, node), 120, "the node uncordoned after the reboot")
    lifted = next(
        e
        for e in sandbox.kube.history()
        if e.resource == "nodes" and e.name == node and not e.removed and not unschedulable(e.object)
    )
    assert boot_id(lifted.object) != reboots.stale_booted_before, (
        "uncordoned on the Ready the kubelet left before the reboot"
    )
    assert instance in sandbox.asg.in_state("InService")
    wait_for(
        lambda: (r := store.get(f"{instance}/{Transition.SCHEDULED_CHANGE.short}")) and r.finished,
        30,
        "the maintenance's lifecycle over",
    )


def test_maintenance_is_drained_before_it_starts_and_a_stopped_instance_leaves_nothing_behind(
    minute_lead: MinuteLead,
) -> None:
    # (the module's sandbox: this test's instances are its third and fourth)
    sandbox, (scheduled, stopped) = minute_lead.sandbox, minute_lead.instances[2:4]
    scheduled_node, stopped_node = node_of(sandbox, scheduled), node_of(sandbox, stopped)
    pin(sandbox, stopped_node)
    sandbox.kube.reset_history()
    store = records(sandbox)

    # Given AWS Health's retirement of one instance, 62 s from now
    sandbox.asg.schedule_maintenance([scheduled], starts_in=STARTS_IN)
    starts = time.time() + STARTS_IN - 1  # (Health's times have whole seconds)

    # Then its node is drained before the maintenance starts, under the budget (its cleanup then keeps the
    # cordon until the maintenance is over)
    maintenance = wait_for(
        lambda: (
            (r := store.get(f"{scheduled}/{Transition.SCHEDULED_CHANGE.short}"))
            and r.drain_started_at is not None
            and r.step in (Step.CLEANUP, Step.DONE)
            and r
        ),
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

    # Then its slot is freed, its claim's annotations cleared and its address released, at once
    gone = wait_for(
        lambda: (r := store.get(f"{stopped}/{Transition.STATE_CHANGE.short}")) and r.finished and r,
        30,
        "the state change's lifecycle",
    )
    assert gone.outcome == "instance-gone-without-hook"
    wait_for(lambda: not addresses_of(sandbox, stopped), 30, "the address released")
    # ...and it stays so once the held-up drain has found its instance stopped and its lifecycle is over (a
    # fixed 5 s wait here proved as much only if that drain had looked within it), the node marked released
    # for the drain's lifecycle (the stop's mark, which the watch after the drain leaves: an instance not
    # coming back)
    held_up = wait_for(
        lambda: (r := store.get(f"{stopped}/{Transition.SCHEDULED_CHANGE.short}")) and r.finished and r,
        30,
        "the held-up drain's lifecycle over",
    )
    assert held_up.outcome == "instance-down"
    assert stopped_node not in current_holders(sandbox)
    released = {"nodecycle.io/released-for": f"{stopped}/{Transition.SCHEDULED_CHANGE.short}"}
    assert nodecycle_annotations(sandbox, stopped_node) == released
    assert addresses_of(sandbox, stopped) == []


def handled(sandbox: Sandbox, event_id: str) -> bool:
    """Whether an invocation of intake with the event ``event_id`` has ended well."""
    return any(
        i.ok and isinstance(i.event, dict) and i.event.get("id") == event_id
        for i in sandbox.runner.journal.invocations("IntakeFunction")
    )


def cordoned(sandbox: Sandbox, node: str) -> bool:
    return bool(((sandbox.kube.get_object("nodes", node) or {}).get("spec") or {}).get("unschedulable"))


def schedule_two_maintenances(sandbox: Sandbox, instance: str) -> dict[str, Any]:
    """A reboot of ``instance`` in ``STARTS_IN`` seconds and a retirement in ``LATER_IN``, each told by AWS
    Health (the reboot first); the reboot's Health event."""
    sandbox.asg.schedule_maintenance([instance], code="system-reboot", starts_in=STARTS_IN)
    sandbox.asg.schedule_maintenance([instance], starts_in=LATER_IN)
    told: list[dict[str, Any]] = [
        n.payload for n in sandbox.aws.notifications() if n.payload.get("source") == "aws.health"
    ]
    # (Health names the instance by its ARN)
    return next(e for e in told if e["detail"]["affectedEntities"][0]["entityValue"].endswith(f"/{instance}"))


def wait_for_the_second(sandbox: Sandbox, instance: str) -> LifecycleRecord:
    """The record of ``instance``'s maintenances once the first one's lifecycle is over and the second's has
    started on it (it waits for its own lead time). (Intake may take the second's event first: the record is
    the second's then too, before the first's moves it, but its node is not cordoned yet. Or last, after the first's
    cleanup has gone to sleep until the reboot's window: intake wakes it, so the second starts then, not at the
    window, 62 s on, past this wait.) The wait is for the first's drain under PodDisruptionBudgets (a few seconds
    alone), and must end before the reboot starts, which the update below must precede."""
    store = records(sandbox)
    node = node_of(sandbox, instance)
    later = time.time() + LATER_IN - 120

    def started() -> LifecycleRecord | None:
        record = store.get(f"{instance}/{Transition.SCHEDULED_CHANGE.short}")
        if record is None or record.finished or record.global_deadline.timestamp() < later:
            return None
        cordoned = ((sandbox.kube.get_object("nodes", node) or {}).get("spec") or {}).get("unschedulable")
        waiting = record.drain_started_at is None and "successor" not in record.extra
        return record if cordoned and waiting else None

    return wait_for(started, STARTS_IN - 10, "the second maintenance's lifecycle")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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


def node_object(sandbox: Sandbox, node: str) -> dict[str, Any]:
    return sandbox.kube.get_object("nodes", node) or {}


def unschedulable(node: dict[str, Any]) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable"))


def boot_id(node: dict[str, Any]) -> str | None:
    return ((node.get("status") or {}).get("nodeInfo") or {}).get("bootID")
