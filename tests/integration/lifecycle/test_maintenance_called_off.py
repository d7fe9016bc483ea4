"""A scheduled maintenance that EC2 no longer lists when its drain comes due (called off after AWS Health told of
it), or never listed (a Health scheduled change that is no scheduled event of the instance's), drains no node; one
EC2 lists at a later start (moved) is drained for that start, whether moved before its drain or after it, and one
moved earlier while its lifecycle waits is drained before its new start: end to end, EC2's listing read through
DescribeInstanceStatus as the drain function reads it."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from nodecycle.domain.model import MAINTENANCE_LISTED, LifecycleRecord, Step, Transition
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws import ec2_events
from nodecycle_sandbox.aws.group import wait_for
from tests.integration.lifecycle.harness import node_of, records, running
from tests.integration.lifecycle.test_maintenance_and_stops import cordoned, handled, holders_seen

pytestmark = pytest.mark.slow

# The maintenance starts 75 s from now: MaintenanceLeadMinutes=1 makes its drain due 15 s from now, time enough for
# intake to take it in and for EC2 to call it off before then
STARTS_IN = 75.0
TOLD_AGO = 2 * 3600.0  # AWS Health's notice of a scheduled change long before its drain is due
MOVED_BY = 30.0  # how much later a customer moves a maintenance
DEADLINE_IN = 7 * 86400.0  # the latest start EC2 lets a reboot be moved to (its NotBeforeDeadline), from now


def finished(sandbox: Sandbox, instance: str) -> LifecycleRecord:
    store = records(sandbox)
    return wait_for(
        lambda: (r := store.get(f"{instance}/{Transition.SCHEDULED_CHANGE.short}")) and r.finished and r,
        STARTS_IN,
        "the maintenance's lifecycle over",
    )


def test_a_maintenance_called_off_before_its_drain_is_due_drains_no_node() -> None:
    with running(size=3, parameters={"MaintenanceLeadMinutes": "1"}) as sandbox:
        instance = sorted(sandbox.asg.in_state("InService"))[0]
        node = node_of(sandbox, instance)
        store = records(sandbox)
        sandbox.kube.reset_history()

        # Given EC2's system reboot of an instance, told by AWS Health and taken in (its drain due in 15 s)
        sandbox.asg.schedule_maintenance([instance], code="system-reboot", starts_in=STARTS_IN)
        taken = wait_for(
            lambda: store.get(f"{instance}/{Transition.SCHEDULED_CHANGE.short}"),
            30,
            "the maintenance taken in",
        )
        assert taken.step is Step.ACQUIRE_SLOT
        assert taken.extra.get(MAINTENANCE_LISTED)
        assert taken.due_at > datetime.now(UTC), "taken in too late for the test: its drain began"

        # When EC2 calls it off (it lists the event "[Canceled]", and Health's update of it is closed)
        sandbox.asg.end_maintenance([instance], canceled=True)

        # Then, its due time come, the node is neither given a slot nor cordoned, and the lifecycle ends saying why
        record = finished(sandbox, instance)
        assert record.outcome == "maintenance-not-listed"
        assert record.drain_started_at is None
        assert node not in holders_seen(sandbox.kube.history())
        assert not cordoned(sandbox, node)


def test_a_health_scheduled_change_ec2_never_lists_drains_no_node() -> None:
    with running(size=3, parameters={"MaintenanceLeadMinutes": "1"}) as sandbox:
        instance = sorted(sandbox.asg.in_state("InService"))[0]
        node = node_of(sandbox, instance)
        sandbox.kube.reset_history()

        # Given an AWS Health scheduled change of EC2 naming the instance, told two hours ago and starting in 75 s,
        # which EC2 does not list among the instance's scheduled events (DescribeInstanceStatus): taken in, as
        # Health's own event (EC2's list may lag it)
        now = time.time()
        account = sandbox.client("sts").get_caller_identity()["Account"]
        event = ec2_events.health_scheduled_change(
            at=now - TOLD_AGO,
            account=account,
            region=sandbox.options.region,
            instance_ids=[instance],
            code="instance-retirement",
            starts=now + STARTS_IN,
            ends=now + STARTS_IN + 3600,
        )
        sandbox.publish(event)
        wait_for(lambda: handled(sandbox, event["id"]), 30, "intake's handling of the event")

        # Then, its due time come, EC2 listing nothing, the node is neither given a slot nor cordoned
        record = finished(sandbox, instance)
        assert record.outcome == "maintenance-not-listed"
        assert node not in holders_seen(sandbox.kube.history())
        assert not cordoned(sandbox, node)


def test_a_maintenance_moved_later_is_drained_for_its_new_start_not_its_old_one() -> None:
    with running(size=3, parameters={"MaintenanceLeadMinutes": "1"}) as sandbox:
        instance = sorted(sandbox.asg.in_state("InService"))[0]
        store = records(sandbox)

        # Given EC2's system reboot of an instance, told by AWS Health and taken in (its drain due in 15 s)
        began = time.time()
        sandbox.asg.schedule_maintenance(
            [instance], code="system-reboot", starts_in=STARTS_IN, deadline_in=DEADLINE_IN
        )
        taken = wait_for(
            lambda: store.get(f"{instance}/{Transition.SCHEDULED_CHANGE.short}"),
            30,
            "the maintenance taken in",
        )
        assert taken.due_at > datetime.now(UTC), "taken in too late for the test: its drain began"

        # When the customer moves it 30 s later (ModifyInstanceEventStartTime; no Health event tells of it)
        sandbox.asg.reschedule_maintenance([instance], starts_in=began + STARTS_IN + MOVED_BY - time.time())
        (listed,) = sandbox.client("ec2").describe_instance_status(InstanceIds=[instance])[
            "InstanceStatuses"
        ][0]["Events"]

        # Then its node is drained a lead time before the new start, not the old one, the lifecycle timed by it
        drained = wait_for(
            lambda: (
                (r := store.get(f"{instance}/{Transition.SCHEDULED_CHANGE.short}"))
                and r.drain_started_at
                and r
            ),
            STARTS_IN,
            "the drain for the moved maintenance",
        )
        assert drained.global_deadline == listed["NotBefore"]
        assert drained.drain_started_at is not None
        assert drained.drain_started_at.timestamp() >= began + STARTS_IN + MOVED_BY - 60 - 1


# A reboot 12 s from now: MaintenanceLeadMinutes=1 drains at once; the customer then moves it 75 s from then, so that
# its new drain is due 15 s after the move
REBOOT_IN = 12.0
MOVED_TO = 75.0


def test_a_maintenance_moved_later_once_its_node_is_drained_is_drained_again_for_its_new_start() -> None:
    with running(size=3, parameters={"MaintenanceLeadMinutes": "1"}) as sandbox:
        instance = sorted(sandbox.asg.in_state("InService"))[0]
        node = node_of(sandbox, instance)
        store = records(sandbox)
        key = f"{instance}/{Transition.SCHEDULED_CHANGE.short}"

        # Given EC2's system reboot of an instance 12 s from now, its node drained for it (cordoned, empty), the
        # lifecycle watching for the reboot's end
        sandbox.asg.schedule_maintenance(
            [instance], code="system-reboot", starts_in=REBOOT_IN, deadline_in=DEADLINE_IN
        )
        drained = wait_for(
            lambda: (r := store.get(key)) and r.drain_started_at and r.step is Step.CLEANUP and r,
            REBOOT_IN,
            "the reboot's drain",
        )
        assert cordoned(sandbox, node)

        # When the customer moves the reboot 75 s on (ModifyInstanceEventStartTime; no Health event tells of it)
        sandbox.asg.reschedule_maintenance([instance], starts_in=MOVED_TO)
        (listed,) = sandbox.client("ec2").describe_instance_status(InstanceIds=[instance])[
            "InstanceStatuses"
        ][0]["Events"]
        moved = listed["NotBefore"]

        # Then the node is drained again a lead time before the new start, by a lifecycle timed by it: the watch
        # after the first drain does not take the old start's passing for the reboot's end and leave it at that
        again = wait_for(
            lambda: (
                (r := store.get(key))
                and r.global_deadline == moved
                and r.drain_started_at
                and r.drain_started_at > drained.drain_started_at
                and r
            ),
            MOVED_TO,
            "the drain for the moved reboot",
        )
        assert again.drain_started_at is not None
        assert again.drain_started_at.timestamp() >= moved.timestamp() - 60 - 1
        wait_for(lambda: (r := store.get(key)) and r.step is Step.CLEANUP, 30, "the second drain over")
        assert cordoned(sandbox, node)


# A reboot an hour from now (MaintenanceLeadMinutes=1: drained 59 minutes on), which the customer moves 90 s from then
AN_HOUR = 3600.0
MOVED_EARLIER_TO = 90.0


def test_a_maintenance_moved_earlier_while_its_lifecycle_waits_is_drained_before_its_new_start() -> None:
    with running(size=3, parameters={"MaintenanceLeadMinutes": "1"}) as sandbox:
        instance = sorted(sandbox.asg.in_state("InService"))[0]
        node = node_of(sandbox, instance)
        store = records(sandbox)
        key = f"{instance}/{Transition.SCHEDULED_CHANGE.short}"

        # Given EC2's system reboot of an instance an hour from now, told by AWS Health and taken in
        sandbox.asg.schedule_maintenance(
            [instance], code="system-reboot", starts_in=AN_HOUR, deadline_in=DEADLINE_IN
        )
        taken = wait_for(lambda: store.get(key), 30, "the maintenance taken in")
        assert taken.drain_started_at is None

        # When the customer moves it earlier, 90 s from now (ModifyInstanceEventStartTime; no Health event tells of
        # it)
        sandbox.asg.reschedule_maintenance([instance], starts_in=MOVED_EARLIER_TO)
        (listed,) = sandbox.client("ec2").describe_instance_status(InstanceIds=[instance])[
            "InstanceStatuses"
        ][0]["Events"]
        moved = listed["NotBefore"]

        # Then its node is drained before the new start, by the lifecycle timed by it, not 59 minutes on
        drained = wait_for(
            lambda: (r := store.get(key)) and r.drain_started_at and r,
            MOVED_EARLIER_TO,
            "the drain for the reboot moved earlier",
        )
        assert drained.global_deadline == moved
        assert drained.drain_started_at is not None
        assert drained.drain_started_at < moved
        assert cordoned(sandbox, node)
