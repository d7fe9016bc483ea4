"""A scheduled maintenance that EC2 no longer lists when its drain comes due (called off after AWS Health told of
it), or never listed (a Health scheduled change that is no scheduled event of the instance's), drains no node; one
EC2 lists at a later start (moved) is drained for that start, whether moved before its drain or after it, and one
moved earlier while its lifecycle waits is drained before its new start: end to end, EC2's listing read through
DescribeInstanceStatus as the drain function reads it. And a maintenance's drain under a PodDisruptionBudget that never
lets its pod go is forced only where it must be for the pods' grace to be over before the start.

All six are one sandbox's, each on an instance of its own, their maintenances set going at once: each waits for its
maintenance's lead time (15 s and more, real time), and one after the other on a sandbox each the file took five
sandboxes' starts and the sum of those waits (two sandboxes, one for the first three and one for the two moves,
still took two starts and two such waits one after the other, the sandbox busy all the while; the forced drain had a
file and a sandbox of its own, test_maintenance_lead_pdb, and waited 62 s more). Each test's instance is the only one
its maintenance names, and its assertions are about its own node and its own lifecycle."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from nodecycle.domain.model import MAINTENANCE_LISTED, LifecycleRecord, Step, Transition
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws import ec2_events
from nodecycle_sandbox.aws.group import wait_for
from nodecycle_sandbox.checks import last_pod_gone, pdb_breaches
from tests.integration.lifecycle.harness import node_of, pin, records, running
from tests.integration.lifecycle.test_maintenance_and_stops import cordoned, handled, holders_seen

pytestmark = pytest.mark.slow

# The maintenance starts 75 s from now: MaintenanceLeadMinutes=1 makes its drain due 15 s from now, time enough for
# intake to take it in and for EC2 to call it off before then
STARTS_IN = 75.0
TOLD_AGO = 2 * 3600.0  # AWS Health's notice of a scheduled change long before its drain is due
# How much later a customer moves a maintenance: its drain comes due 15 s after the old due time, which a drain
# for the old start (due at 15 s, begun within a poll of it) is well short of
MOVED_BY = 15.0
DEADLINE_IN = 7 * 86400.0  # the latest start EC2 lets a reboot be moved to (its NotBeforeDeadline), from now


@dataclass(frozen=True)
class Maintenances:
    """The sandbox, and what each test's instance went through before its maintenance's drain came due."""

    sandbox: Sandbox
    called_off: str  # EC2's system reboot, told and taken in, then called off
    called_off_taken: LifecycleRecord  # its lifecycle as intake took it in, before the call-off
    never_listed: str  # a Health scheduled change EC2 never lists
    moved: str  # EC2's system reboot, taken in, then moved MOVED_BY later
    moved_began: float  # when its maintenance was scheduled (time.time())
    moved_taken: LifecycleRecord  # its lifecycle as intake took it in, before the move
    moved_listed: dict[str, Any]  # EC2's listing of its event once moved (DescribeInstanceStatus)


def finished(sandbox: Sandbox, instance: str) -> LifecycleRecord:
    store = records(sandbox)
    return wait_for(
        lambda: (r := store.get(f"{instance}/{Transition.SCHEDULED_CHANGE.short}")) and r.finished and r,
        STARTS_IN,
        "the maintenance's lifecycle over",
    )


def taken_in(sandbox: Sandbox, instance: str) -> LifecycleRecord:
    store = records(sandbox)
    return wait_for(
        lambda: store.get(f"{instance}/{Transition.SCHEDULED_CHANGE.short}"),
        30,
        "the maintenance taken in",
    )


def tell_maintenances(
    sandbox: Sandbox, called_off: str, never_listed: str, moved: str
) -> tuple[float, dict[str, Any]]:
    """Each maintenance told (see below); when the reboots were scheduled, and AWS Health's event of the third."""
    # EC2's system reboots of two instances, each told by AWS Health (their drains due in 15 s)
    began = time.time()
    sandbox.asg.schedule_maintenance([called_off], code="system-reboot", starts_in=STARTS_IN)
    sandbox.asg.schedule_maintenance(
        [moved], code="system-reboot", starts_in=STARTS_IN, deadline_in=DEADLINE_IN
    )
    # and an AWS Health scheduled change of EC2 naming the third, told two hours ago and starting in 75 s,
    # which EC2 does not list among the instance's scheduled events (DescribeInstanceStatus): taken in, as
    # Health's own event (EC2's list may lag it)
    now = time.time()
    account = sandbox.client("sts").get_caller_identity()["Account"]
    event = ec2_events.health_scheduled_change(
        at=now - TOLD_AGO,
        account=account,
        region=sandbox.options.region,
        instance_ids=[never_listed],
        code="instance-retirement",
        starts=now + STARTS_IN,
        ends=now + STARTS_IN + 3600,
    )
    sandbox.publish(event)
    return began, event


def take_in_and_change(
    sandbox: Sandbox, called_off: str, never_listed: str, moved: str, began: float
) -> Maintenances:
    # The two reboots taken in before their drains came due; then EC2 calls the first off (it lists the event
    # "[Canceled]", and Health's update of it is closed), and the customer moves the second MOVED_BY later
    # (ModifyInstanceEventStartTime; no Health event tells of it)
    called_off_taken = taken_in(sandbox, called_off)
    moved_taken = taken_in(sandbox, moved)
    assert called_off_taken.due_at > datetime.now(UTC), "taken in too late for the test: its drain began"
    assert moved_taken.due_at > datetime.now(UTC), "taken in too late for the test: its drain began"
    sandbox.asg.end_maintenance([called_off], canceled=True)
    sandbox.asg.reschedule_maintenance([moved], starts_in=began + STARTS_IN + MOVED_BY - time.time())
    (listed,) = sandbox.client("ec2").describe_instance_status(InstanceIds=[moved])["InstanceStatuses"][0][
        "Events"
    ]
    return Maintenances(
        sandbox=sandbox,
        called_off=called_off,
        called_off_taken=called_off_taken,
        never_listed=never_listed,
        moved=moved,
        moved_began=began,
        moved_taken=moved_taken,
        moved_listed=listed,
    )


def test_a_maintenance_called_off_before_its_drain_is_due_drains_no_node(maintenances: Maintenances) -> None:
    sandbox, instance = maintenances.sandbox, maintenances.called_off
    node = node_of(sandbox, instance)

    # Given EC2's system reboot of an instance, told by AWS Health and taken in (its drain due in 15 s)
    taken = maintenances.called_off_taken
    assert taken.step is Step.ACQUIRE_SLOT
    assert taken.extra.get(MAINTENANCE_LISTED)

    # When EC2 calls it off before its drain is due (the fixture: "[Canceled]" listed, Health's update closed)

    # Then, its due time come, the node is neither given a slot nor cordoned, and the lifecycle ends saying why
    record = finished(sandbox, instance)
    assert record.outcome == "maintenance-not-listed"
    assert record.drain_started_at is None
    assert node not in holders_seen(sandbox.kube.history())
    assert not cordoned(sandbox, node)


def test_a_health_scheduled_change_ec2_never_lists_drains_no_node(maintenances: Maintenances) -> None:
    sandbox, instance = maintenances.sandbox, maintenances.never_listed
    node = node_of(sandbox, instance)

    # Given an AWS Health scheduled change of EC2 naming the instance, which EC2 never lists, taken in (the fixture)

    # Then, its due time come, EC2 listing nothing, the node is neither given a slot nor cordoned
    record = finished(sandbox, instance)
    assert record.outcome == "maintenance-not-listed"
    assert node not in holders_seen(sandbox.kube.history())
    assert not cordoned(sandbox, node)


def test_a_maintenance_moved_later_is_drained_for_its_new_start_not_its_old_one(
    maintenances: Maintenances,
) -> None:
    sandbox, instance = maintenances.sandbox, maintenances.moved
    store = records(sandbox)

    # Given EC2's system reboot of an instance, told by AWS Health and taken in (its drain due in 15 s)
    # When the customer moves it MOVED_BY later (the fixture, before the old due time)

    # Then its node is drained a lead time before the new start, not the old one, the lifecycle timed by it
    drained = wait_for(
        lambda: (
            (r := store.get(f"{instance}/{Transition.SCHEDULED_CHANGE.short}")) and r.drain_started_at and r
        ),
        STARTS_IN,
        "the drain for the moved maintenance",
    )
    assert drained.global_deadline == maintenances.moved_listed["NotBefore"]
    assert drained.drain_started_at is not None
    assert drained.drain_started_at.timestamp() >= maintenances.moved_began + STARTS_IN + MOVED_BY - 60 - 1


# A reboot 12 s from now, which MaintenanceLeadMinutes=1 drains at once; once drained the customer moves it 75 s from
# then, so that its new drain is due 15 s after the move. And a reboot an hour from now (drained 59 minutes on),
# which the customer moves 90 s from then while its lifecycle waits.
REBOOT_IN = 12.0
MOVED_TO = 75.0
AN_HOUR = 3600.0
MOVED_EARLIER_TO = 90.0


@dataclass(frozen=True)
class Moves:
    """The sandbox, and each test's instance, its maintenance moved, as EC2 lists it once moved."""

    sandbox: Sandbox
    moved_after_drain: str  # EC2's system reboot, drained for, then moved MOVED_TO on
    first_drain: LifecycleRecord  # its lifecycle once drained for the first start
    moved_after_drain_to: datetime  # the reboot's new start (its NotBefore listed)
    moved_earlier: str  # EC2's system reboot an hour on, taken in, then moved MOVED_EARLIER_TO on
    moved_earlier_to: datetime


def schedule_moves(sandbox: Sandbox, after_drain: str, earlier: str) -> float:
    """EC2's system reboots of two instances, 12 s on and an hour on; when they were scheduled."""
    scheduled = time.time()
    sandbox.asg.schedule_maintenance(
        [after_drain], code="system-reboot", starts_in=REBOOT_IN, deadline_in=DEADLINE_IN
    )
    sandbox.asg.schedule_maintenance(
        [earlier], code="system-reboot", starts_in=AN_HOUR, deadline_in=DEADLINE_IN
    )
    return scheduled


def move(sandbox: Sandbox, after_drain: str, earlier: str, scheduled: float) -> Moves:
    store = records(sandbox)

    # The first reboot's node drained for it (cordoned, empty), its lifecycle watching for the reboot's end, before
    # the reboot starts (12 s from ``scheduled``); the customer then moves it MOVED_TO on
    # (ModifyInstanceEventStartTime; no Health event tells of it)
    key = f"{after_drain}/{Transition.SCHEDULED_CHANGE.short}"
    drained = wait_for(
        lambda: (r := store.get(key)) and r.drain_started_at and r.step is Step.CLEANUP and r,
        max(0.0, scheduled + REBOOT_IN - time.time()),
        "the reboot's drain",
    )
    assert cordoned(sandbox, node_of(sandbox, after_drain))
    sandbox.asg.reschedule_maintenance([after_drain], starts_in=MOVED_TO)

    # The second taken in, not drained (due 59 minutes on); the customer then moves it earlier
    taken = wait_for(
        lambda: store.get(f"{earlier}/{Transition.SCHEDULED_CHANGE.short}"),
        30,
        "the maintenance taken in",
    )
    assert taken.drain_started_at is None
    sandbox.asg.reschedule_maintenance([earlier], starts_in=MOVED_EARLIER_TO)

    def listed_start(instance: str) -> datetime:
        (event,) = sandbox.client("ec2").describe_instance_status(InstanceIds=[instance])["InstanceStatuses"][
            0
        ]["Events"]
        return cast("datetime", event["NotBefore"])

    return Moves(
        sandbox=sandbox,
        moved_after_drain=after_drain,
        first_drain=drained,
        moved_after_drain_to=listed_start(after_drain),
        moved_earlier=earlier,
        moved_earlier_to=listed_start(earlier),
    )


@dataclass(frozen=True)
class Pinned:
    """The instance whose node runs a pod its PodDisruptionBudget never lets go, its retirement told PINNED_STARTS_IN
    ahead, and when that retirement starts (time.time(), whole seconds as Health tells them)."""

    instance: str
    node: str
    starts: float


@dataclass(frozen=True)
class Scene:
    """The maintenances above, the moves, and the pinned pod's retirement, on one sandbox, each test on an instance of
    its own."""

    maintenances: Maintenances
    moves: Moves
    pinned: Pinned


@pytest.fixture(scope="module")
def scene() -> Iterator[Scene]:
    # (a budget of three in the cluster and in a zone: the drains of the moves, of the moved maintenance and of the
    # pinned pod's retirement may overlap, none of them waiting in line for another's slot; each test's assertions are
    # about its own lifecycle)
    parameters = {
        "MaintenanceLeadMinutes": "1",
        "BudgetMaxUnavailable": "3",
        "BudgetMaxUnavailablePerZone": "3",
    }
    with running(size=6, parameters=parameters) as sandbox:
        called_off, never_listed, moved, after_drain, earlier, pinned = sorted(
            sandbox.asg.in_state("InService")
        )
        pinned_node = node_of(sandbox, pinned)
        pin(sandbox, pinned_node)
        sandbox.kube.reset_history()
        # Every maintenance scheduled at once, their lead times running together
        began, event = tell_maintenances(sandbox, called_off, never_listed, moved)
        scheduled = schedule_moves(sandbox, after_drain, earlier)
        sandbox.asg.schedule_maintenance([pinned], starts_in=PINNED_STARTS_IN)
        pinned_starts = time.time() + PINNED_STARTS_IN - 1  # (Health's times have whole seconds)
        maintenances = take_in_and_change(sandbox, called_off, never_listed, moved, began)
        moves = move(sandbox, after_drain, earlier, scheduled)
        wait_for(lambda: handled(sandbox, event["id"]), 30, "intake's handling of the Health event")
        yield Scene(maintenances=maintenances, moves=moves, pinned=Pinned(pinned, pinned_node, pinned_starts))


@pytest.fixture(scope="module")
def maintenances(scene: Scene) -> Maintenances:
    return scene.maintenances


@pytest.fixture(scope="module")
def moves(scene: Scene) -> Moves:
    return scene.moves


def test_a_maintenance_moved_later_once_its_node_is_drained_is_drained_again_for_its_new_start(
    moves: Moves,
) -> None:
    sandbox, instance, moved = moves.sandbox, moves.moved_after_drain, moves.moved_after_drain_to
    store = records(sandbox)
    key = f"{instance}/{Transition.SCHEDULED_CHANGE.short}"
    first = moves.first_drain.drain_started_at
    assert first is not None

    # Given EC2's system reboot of an instance 12 s on, its node drained for it (the fixture)
    # When the customer moves the reboot 75 s on (the fixture)

    # Then the node is drained again a lead time before the new start, by a lifecycle timed by it: the watch after
    # the first drain does not take the old start's passing for the reboot's end and leave it at that
    again = wait_for(
        lambda: (
            (r := store.get(key))
            and r.global_deadline == moved
            and r.drain_started_at
            and r.drain_started_at > first
            and r
        ),
        MOVED_TO,
        "the drain for the moved reboot",
    )
    assert again.drain_started_at is not None
    assert again.drain_started_at.timestamp() >= moved.timestamp() - 60 - 1
    wait_for(lambda: (r := store.get(key)) and r.step is Step.CLEANUP, 30, "the second drain over")
    assert cordoned(sandbox, node_of(sandbox, instance))


def test_a_maintenance_moved_earlier_while_its_lifecycle_waits_is_drained_before_its_new_start(
    moves: Moves,
) -> None:
    sandbox, instance, moved = moves.sandbox, moves.moved_earlier, moves.moved_earlier_to
    store = records(sandbox)
    key = f"{instance}/{Transition.SCHEDULED_CHANGE.short}"

    # Given EC2's system reboot of an instance an hour on, taken in (the fixture)
    # When the customer moves it earlier, 90 s on (the fixture)

    # Then its node is drained before the new start, by the lifecycle timed by it, not 59 minutes on
    drained = wait_for(
        lambda: (r := store.get(key)) and r.drain_started_at and r,
        MOVED_EARLIER_TO,
        "the drain for the reboot moved earlier",
    )
    assert drained.global_deadline == moved
    assert drained.drain_started_at is not None
    assert drained.drain_started_at < moved
    assert cordoned(sandbox, node_of(sandbox, instance))


# MaintenanceLeadMinutes=1 drains a maintenance 35 s ahead at once; its force must act 15 s before the start (the
# forced pods' grace and the look's slack), some 18 s into the drain, not a second into it. (It was 62 s, the drain
# from 2 s on and the force 45 s into it, on a sandbox of its own: a sandbox's start and a wait of 30 s more that told
# nothing more.)
PINNED_STARTS_IN = 35.0
FORCE_GRACE = 10  # ForceGraceSeconds' default: the forced pods' grace, over before the start
LOOK = 5  # the look at the force's deadline and at the grace's end


def test_a_maintenance_drain_a_minute_ahead_evicts_under_the_budgets_until_the_force_must_act(
    scene: Scene,
) -> None:
    """A maintenance drained with a minute's lead (MaintenanceLeadMinutes=1), on a node with a pod its
    PodDisruptionBudget never lets go. No lifecycle action is completed for a maintenance, so its drain keeps evicting
    under the budgets until its timeout policy must act for the pods' grace to be over before the start: the force
    then, not a second into the drain (a deadline capped as a terminate hook's, whose action must be completed minutes
    before its global timeout, was past before the drain began, and the force deleted what the budgets still held:
    the PodDisruptionBudget breach of shop/web seen in a maintenance drain, its pods crowded on the node by drains
    before it)."""
    sandbox, pinned = scene.moves.sandbox, scene.pinned
    instance, node, starts = pinned.instance, pinned.node, pinned.starts
    store = records(sandbox)

    # Given a node with a pod whose PodDisruptionBudget never lets it go (the fixture)
    # When AWS Health schedules its instance's retirement 35 s from then (the fixture)
    record = wait_for(
        lambda: (
            (r := store.get(f"{instance}/{Transition.SCHEDULED_CHANGE.short}"))
            and r.step in (Step.CLEANUP, Step.DONE)
            and r
        ),
        max(0.0, starts + 6 - time.time()),
        "the maintenance drain",
    )
    history = sandbox.kube.history()

    # Then the pinned pod is deleted by the force policy only where the force must act for its grace to be over
    # before the start, not a second into the drain; the budgets are kept until then (the other drains of the
    # sandbox evict under them too)
    assert record.outcome == "drain-timeout-forced"
    deletes = [
        e.time
        for e in history
        if e.kind == "Pod" and e.source == "api" and e.verb == "delete" and e.resource == "pods"
        if (e.object.get("spec") or {}).get("nodeName") == node
    ]
    assert deletes, "the force deleted nothing"
    forced = min(deletes)
    assert forced >= starts - FORCE_GRACE - LOOK - 2, (
        f"forced {starts - forced:.1f} s before the maintenance, told {PINNED_STARTS_IN:.0f} s ahead"
    )
    assert [b for b in pdb_breaches(history) if b.time < forced] == []
    assert {b.budget for b in pdb_breaches(history)} <= {"pinned/pinned"}
    emptied = last_pod_gone(history, node)
    assert emptied is not None
    assert emptied < starts
