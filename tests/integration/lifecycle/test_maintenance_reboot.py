"""A node drained for EC2's scheduled reboot, kept cordoned through the reboot itself: EC2 lists the event
completed while the instance still boots, and the node stays Ready as the old kubelet left it until the node
monitor's grace is over. The cordon is lifted only once the rebooted kubelet posts the node's status (a new boot
id), not on that stale Ready."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from nodecycle.domain.model import Step, Transition
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.group import wait_for
from tests.integration.lifecycle.harness import node_of, records, running

pytestmark = pytest.mark.slow

# A reboot 12 s from now: MaintenanceLeadMinutes=1 drains at once
REBOOT_IN = 12.0
# How long the reboot keeps the kubelet away: longer than two of the watch's looks (12 drain polls of 1 s), shorter
# than the node monitor's grace (40 s), so that the node says Ready, as the old kubelet left it, all through the
# reboot: each look of the watch meanwhile finds the reboot listed completed and the node Ready
REBOOT_SECONDS = 30.0


@pytest.fixture(scope="module")
def minute_lead() -> Iterator[Sandbox]:
    with running(size=2, parameters={"MaintenanceLeadMinutes": "1"}) as sandbox:
        sandbox.aws.configure(boot_seconds=REBOOT_SECONDS)
        yield sandbox


def test_a_node_drained_for_a_reboot_stays_cordoned_until_its_kubelet_is_back_from_the_reboot(
    minute_lead: Sandbox,
) -> None:
    sandbox = minute_lead
    instance = sorted(sandbox.asg.in_state("InService"))[0]
    node = node_of(sandbox, instance)
    store = records(sandbox)
    booted_before = boot_id(node_object(sandbox, node))

    # Given EC2's system reboot of one instance 12 s from now, its node drained (cordoned, empty) for it
    sandbox.asg.schedule_maintenance([instance], code="system-reboot", starts_in=REBOOT_IN)
    starts = time.time() + REBOOT_IN
    wait_for(
        lambda: (
            (r := store.get(f"{instance}/{Transition.SCHEDULED_CHANGE.short}"))
            and r.drain_started_at is not None
            and r.step in (Step.CLEANUP, Step.DONE)
            and cordoned(node_object(sandbox, node))
        ),
        REBOOT_IN + 30,
        "the reboot's drain",
    )

    # When EC2 reboots it in its window, listing the event completed at once, its kubelet away for 30 s
    time.sleep(max(0.0, starts - time.time()))
    sandbox.kube.reset_history()
    sandbox.asg.end_maintenance([instance])

    # Then the node is uncordoned, but only once the rebooted kubelet has posted its status (its new boot id): on the
    # Ready left from before the reboot, pods were sent to a node whose kubelet was not running
    wait_for(lambda: not cordoned(node_object(sandbox, node)), 120, "the node uncordoned after the reboot")
    lifted = next(
        e
        for e in sandbox.kube.history()
        if e.resource == "nodes" and e.name == node and not e.removed and not cordoned(e.object)
    )
    assert boot_id(lifted.object) != booted_before, (
        "uncordoned on the Ready the kubelet left before the reboot"
    )
    assert instance in sandbox.asg.in_state("InService")
    wait_for(
        lambda: (r := store.get(f"{instance}/{Transition.SCHEDULED_CHANGE.short}")) and r.finished,
        30,
        "the maintenance's lifecycle over",
    )


def node_object(sandbox: Sandbox, node: str) -> dict[str, Any]:
    return sandbox.kube.get_object("nodes", node) or {}


def cordoned(node: dict[str, Any]) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable"))


def boot_id(node: dict[str, Any]) -> str | None:
    return ((node.get("status") or {}).get("nodeInfo") or {}).get("bootID")
