"""Two scheduled maintenances' drains waiting in the disruption budget's line (another stack holds the one slot),
one moved later by the customer (ModifyInstanceEventStartTime, which no AWS Health event tells of), the other called
off by EC2 (listed "[Canceled]", Health's update closed): end to end, EC2's listing read through
DescribeInstanceStatus, the line read in the budget's ConfigMap. Each leaves the line at its look at EC2 in line: the
one called off ends undrained, the one moved later waits for its new start's lead time. Kept in line, each drained its
node when the other stack's slot came free: for nothing, or days early.

One sandbox for both (a start each would double the file's time), their maintenances scheduled together; each
test's assertions are about its own instance's lifecycle, node and place in line."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from nodecycle.domain.model import LifecycleRecord, Step, Transition
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.group import wait_for
from tests.integration.lifecycle.harness import node_of, records, running
from tests.integration.lifecycle.test_drain import claim_as
from tests.integration.lifecycle.test_maintenance_and_stops import cordoned

pytestmark = pytest.mark.slow

LEAD_MINUTES = 4
# The maintenances start a lead time and 5 s from now: their drains are due 5 s on, the one slot held by another stack
# already (due before intake takes them in, on a loaded machine, they join the line as soon as it does; it was 15 s,
# waited out before every look below). A waiter looks at EC2 a quarter of the lead time into line (60 s: the least
# there is, policy.MAINTENANCE_LOOK_LEAST), and stands there until its start forces it past the budget a whole drain
# before it: 27 s with these settings (a 20 s drain timeout, 2 s force grace, 5 s of look slack: a maintenance
# completes no action, so neither the stuck pods' minute nor the engine's settle margin counts; drain/common._tail_of),
# some 3.5 minutes into line, well after its look. (A 6-minute lead, the look at 90 s, was 30 s more of the file's
# wait; before that it was 182 s, a hook's tail, some 3 minutes into line; a 7-minute lead, the look at 105 s.)
STARTS_IN = LEAD_MINUTES * 60 + 5.0
LOOK_IN_LINE = LEAD_MINUTES * 60 / 4
MOVED_BY = 3600.0  # how much later the customer moves the first reboot
DEADLINE_IN = 7 * 86400.0  # the latest start EC2 lets a reboot be moved to (its NotBeforeDeadline), from now
PARAMETERS = {
    "MaintenanceLeadMinutes": str(LEAD_MINUTES),
    "BudgetMaxUnavailable": "1",
    "DrainTimeoutSeconds": "20",
    "ForceGraceSeconds": "2",
    "WorkVisibilityTimeoutSeconds": "90",
    "HeartbeatMarginSeconds": "5",
}
SWEEP_SECONDS = 10.0  # the sweeper's schedule: its interval counts in the margin before an action's end


@dataclass(frozen=True)
class InLine:
    sandbox: Sandbox
    moved: str  # its reboot moved MOVED_BY later while its drain waits in line
    moved_to: datetime  # the reboot's new start, as EC2 lists it
    called_off: str  # its reboot called off while its drain waits in line


def waiting_nodes(sandbox: Sandbox) -> set[str]:
    """The nodes with a place in the budget's line, as its ConfigMap holds them."""
    configmap = sandbox.kube.get_object("configmaps", "nodecycle-budget", "nodecycle") or {}
    document = json.loads((configmap.get("data") or {}).get("budget.json") or "{}")
    return {waiter["node"] for waiter in document.get("waiters", [])}


def lifecycle(sandbox: Sandbox, instance: str) -> LifecycleRecord | None:
    return records(sandbox).get(f"{instance}/{Transition.SCHEDULED_CHANGE.short}")


@pytest.fixture(scope="module")
def in_line() -> Iterator[InLine]:
    with running(
        size=3,
        parameters=PARAMETERS,
        settings={"NODECYCLE_SWEEP_INTERVAL_MINUTES": str(SWEEP_SECONDS / 60)},
        schedule_interval=SWEEP_SECONDS,
    ) as sandbox:
        moved, called_off, blocker = sorted(sandbox.asg.in_state("InService"))
        # Another stack drains the third node: it holds the one slot of the budget until the test is over
        assert claim_as(sandbox, "stack-b", node_of(sandbox, blocker), hold_slot=True, annotate=False)
        began = time.time()
        sandbox.asg.schedule_maintenance(
            [moved], code="system-reboot", starts_in=STARTS_IN, deadline_in=DEADLINE_IN
        )
        sandbox.asg.schedule_maintenance([called_off], code="system-reboot", starts_in=STARTS_IN)

        # Both drains come due and wait in line
        nodes = {node_of(sandbox, moved), node_of(sandbox, called_off)}
        wait_for(
            lambda: (
                all((r := lifecycle(sandbox, i)) and r.slot_waiting_since for i in (moved, called_off))
                and waiting_nodes(sandbox) >= nodes
            ),
            60,
            "both drains waiting in line",
        )

        # Then the customer moves the first reboot an hour later, and EC2 calls the second off
        sandbox.asg.reschedule_maintenance([moved], starts_in=began + STARTS_IN + MOVED_BY - time.time())
        sandbox.asg.end_maintenance([called_off], canceled=True)
        (event,) = sandbox.client("ec2").describe_instance_status(InstanceIds=[moved])["InstanceStatuses"][0][
            "Events"
        ]
        moved_to = event["NotBefore"]
        assert moved_to > datetime.now(UTC) + timedelta(minutes=LEAD_MINUTES)
        yield InLine(sandbox=sandbox, moved=moved, moved_to=moved_to, called_off=called_off)


def test_a_drain_waiting_in_line_for_a_maintenance_moved_later_leaves_the_line_until_its_new_lead_time(
    in_line: InLine,
) -> None:
    sandbox, instance = in_line.sandbox, in_line.moved
    node = node_of(sandbox, instance)

    # Given a reboot's drain waiting in line, the reboot moved an hour later (the fixture)

    # Then at its look in line the lifecycle leaves the line, timed by the new start, its node untouched
    left = wait_for(
        lambda: (r := lifecycle(sandbox, instance)) and r.slot_waiting_since is None and r,
        LOOK_IN_LINE + 60,
        "the drain out of the line",
    )
    assert left.global_deadline == in_line.moved_to
    assert left.step is Step.ACQUIRE_SLOT
    assert left.drain_started_at is None
    assert node not in waiting_nodes(sandbox)
    assert not cordoned(sandbox, node)


def test_a_drain_waiting_in_line_for_a_maintenance_called_off_leaves_the_line_undrained(
    in_line: InLine,
) -> None:
    sandbox, instance = in_line.sandbox, in_line.called_off
    node = node_of(sandbox, instance)

    # Given a reboot's drain waiting in line, the reboot called off (the fixture)

    # Then at its look in line the lifecycle ends undrained, its place in line given back
    ended = wait_for(
        lambda: (r := lifecycle(sandbox, instance)) and r.finished and r,
        LOOK_IN_LINE + 60,
        "the lifecycle over",
    )
    assert ended.outcome == "maintenance-not-listed"
    assert ended.drain_started_at is None
    wait_for(lambda: node not in waiting_nodes(sandbox), 30, "its place in line given back")
    assert not cordoned(sandbox, node)
