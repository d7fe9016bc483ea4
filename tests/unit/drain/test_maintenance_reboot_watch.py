"""The watch after a node drained for scheduled maintenance (or for a Spot interruption that stops or hibernates its
instance) lifts the cordon only on a Ready its kubelet posts now: EC2 lists a reboot completed as it carries it out,
while the instance still boots, and the node says Ready as the old kubelet left it until the node monitor's grace is
over. A new boot id is the rebooted kubelet's Ready; on the
same boot, a Lease renewed since the instance was first seen back is the kubelet that never stopped (a reboot
called off, a maintenance that rebooted nothing) or that resumed (hibernation)."""

from __future__ import annotations

from datetime import datetime, timedelta

from nodecycle.domain.drain.cleanup import BOOT_BEFORE, MAINTENANCE_POLL_SECONDS, Outcome
from nodecycle.domain.model import LifecycleRecord
from tests.unit.drain.test_drain_steps import (
    INSTANCE,
    NODE,
    REBOOT_AT,
    Ec2Maintenance,
    FakeAutoscaling,
    FakeEvents,
    FakeSlots,
    cleanup,
    cordoned_for_maintenance,
    drained_for,
    reboot,
)
from tests.unit.drain.test_drain_steps import FakeCluster as Cluster
from tests.unit.review.test_spot_stop_restart import (
    STRIKES,
    cordoned_for_spot,
    drained_for_spot,
    spot_cleanup,
)

BEFORE, AFTER = "boot-before-the-reboot", "boot-after-the-reboot"
LAST_RENEWAL = REBOOT_AT + timedelta(minutes=10)  # the old kubelet's last Lease renewal, as the reboot began


def watching_after_reboot() -> tuple[Cluster, FakeEvents, Ec2Maintenance, LifecycleRecord, object]:
    """A node on boot BEFORE drained for a reboot at REBOOT_AT, its cleanup done and watching; then EC2 lists the
    reboot completed, the instance running in service, its node still Ready: the cluster, the node's events, EC2,
    the record as the watch has it, and the cleanup step."""
    cluster = cordoned_for_maintenance()
    cluster.nodes[NODE] = cluster.nodes[NODE].model_copy(update={"boot_id": BEFORE})
    ec2 = Ec2Maintenance(known={INSTANCE: "running"}, events=[reboot()])
    events = FakeEvents()
    step = cleanup(
        cluster, FakeSlots(holders={NODE}), FakeAutoscaling(states={INSTANCE: "InService"}), events, ec2
    )
    record = drained_for(REBOOT_AT)
    first = step(record, REBOOT_AT - timedelta(minutes=30))
    assert first.again
    watching = record.model_copy(update=first.changes)
    assert watching.extra[BOOT_BEFORE] == BEFORE
    ec2.events = []  # listed [Completed] from now on
    return cluster, events, ec2, watching, step


def posted(cluster: Cluster, version: str, **changes: object) -> None:
    """The node as a status update (or the node monitor) leaves it: a new resourceVersion."""
    cluster.nodes[NODE] = cluster.nodes[NODE].model_copy(update={"resource_version": version, **changes})


def look(step: object, record: LifecycleRecord, at: datetime) -> tuple[Outcome, LifecycleRecord]:
    outcome = step(record, at)  # type: ignore[operator]
    return outcome, record.model_copy(update=outcome.changes)


def test_a_node_whose_instance_still_reboots_stays_cordoned_on_the_ready_its_old_kubelet_left() -> None:
    # Given a node drained for a reboot that EC2 lists completed as the instance boots: the node says Ready, as the
    # old kubelet left it, on the old boot, its Lease renewed no more since the reboot began
    cluster, events, _, watching, step = watching_after_reboot()
    cluster.leases[NODE] = LAST_RENEWAL

    # When the watch looks, then again a minute later (the node monitor's grace not over: Ready still)
    for minutes in (11, 12):
        outcome, watching = look(step, watching, REBOOT_AT + timedelta(minutes=minutes))

        # Then the node stays cordoned, looked at again in a minute
        assert (outcome.again, outcome.delay) == (True, MAINTENANCE_POLL_SECONDS)
        assert cluster.cordoned == {NODE}

    # When the rebooted kubelet posts the node's status: Ready, with the new boot's id
    posted(cluster, "9", boot_id=AFTER)
    cluster.leases[NODE] = REBOOT_AT + timedelta(minutes=13)
    outcome, _ = look(step, watching, REBOOT_AT + timedelta(minutes=13))

    # Then the cordon set for the maintenance is lifted
    assert (outcome.then, outcome.again) == (None, False)
    assert cluster.cordoned == set()
    assert (NODE, "UncordonedAfterMaintenance", "Normal") in events.written


def test_a_node_whose_maintenance_rebooted_nothing_is_uncordoned_once_its_lease_is_renewed() -> None:
    # Given a node drained for a reboot that EC2 called off (or a maintenance that reboots nothing): its kubelet
    # runs all along, Ready on the same boot, renewing its Lease
    cluster, events, _, watching, step = watching_after_reboot()
    cluster.leases[NODE] = LAST_RENEWAL

    # When the watch first finds the maintenance over
    outcome, watching = look(step, watching, REBOOT_AT + timedelta(minutes=11))

    # Then it cannot yet tell that Ready from a stale one: the node stays cordoned
    assert outcome.again
    assert cluster.cordoned == {NODE}

    # When it looks again, the Lease renewed since
    cluster.leases[NODE] = LAST_RENEWAL + timedelta(seconds=50)
    outcome, _ = look(step, watching, REBOOT_AT + timedelta(minutes=12))

    # Then the cordon is lifted
    assert (outcome.then, outcome.again) == (None, False)
    assert cluster.cordoned == set()
    assert (NODE, "UncordonedAfterMaintenance", "Normal") in events.written


def test_a_node_whose_lease_may_not_be_read_is_uncordoned_on_its_ready() -> None:
    # Given a node whose maintenance is over, Ready on the same boot, and an API server that refuses to let the
    # Lease be read (an RBAC from before the rule)
    cluster, _, _, watching, step = watching_after_reboot()
    cluster.leases_refused = "leases.coordination.k8s.io is forbidden"

    # When the watch looks
    outcome, _ = look(step, watching, REBOOT_AT + timedelta(minutes=11))

    # Then the Ready alone tells, as before the rule: the cordon is lifted
    assert (outcome.then, outcome.again) == (None, False)
    assert cluster.cordoned == set()


def test_a_node_whose_spot_instance_resumed_from_hibernation_is_uncordoned_once_its_lease_is_renewed() -> (
    None
):
    # Given our node on boot BEFORE, drained for a Spot interruption that hibernates its instance, its cleanup done
    cluster = cordoned_for_spot()
    cluster.nodes[NODE] = cluster.nodes[NODE].model_copy(update={"boot_id": BEFORE})
    ec2 = Ec2Maintenance(known={INSTANCE: "running"})
    record = drained_for_spot("hibernate")
    events = FakeEvents()
    step = spot_cleanup(cluster, record, ec2, events)
    first, watching = look(step, record, STRIKES - timedelta(seconds=5))
    assert first.again
    assert watching.extra[BOOT_BEFORE] == BEFORE

    # When EC2 hibernates it (a look sees it stopped), then resumes it: the same boot (hibernation keeps the
    # running kernel, and /proc/sys/kernel/random/boot_id with it), the node Ready, the Lease not renewed yet
    ec2.known = {INSTANCE: "stopped"}
    cluster.leases[NODE] = STRIKES
    _, watching = look(step, watching, STRIKES + timedelta(minutes=1))
    ec2.known = {INSTANCE: "running"}
    outcome, watching = look(step, watching, STRIKES + timedelta(minutes=2))

    # Then the node stays cordoned: that Ready may still be the one left from before the hibernation
    assert outcome.again
    assert cluster.cordoned == {NODE}

    # When the resumed kubelet renews its Lease
    cluster.leases[NODE] = STRIKES + timedelta(minutes=2, seconds=30)
    outcome, _ = look(step, watching, STRIKES + timedelta(minutes=3))

    # Then the cordon is lifted, though the boot id never changed
    assert (outcome.then, outcome.again) == (None, False)
    assert cluster.cordoned == set()
    assert (NODE, "UncordonedAfterSpotInterruption", "Normal") in events.written


def test_a_node_whose_reboot_is_over_with_a_later_maintenance_listed_is_not_uncordoned_on_its_old_ready() -> (
    None
):
    # Given a node drained for a reboot that EC2 lists completed as the instance boots, EC2 listing the instance's
    # retirement a week on too (no lifecycle for it on the record yet: AWS Health has not told of it), the node Ready
    # as the old kubelet left it, its Lease renewed no more
    cluster, events, ec2, watching, step = watching_after_reboot()
    retirement = REBOOT_AT + timedelta(days=7)
    ec2.events = [reboot("instance-retirement", at=retirement)]
    cluster.leases[NODE] = LAST_RENEWAL

    # When the watch looks
    outcome, watching = look(step, watching, REBOOT_AT + timedelta(minutes=11))

    # Then the node stays cordoned: the reboot is not taken for moved a week on with the node back
    assert cluster.cordoned == {NODE}
    assert not any(reason.startswith("Uncordoned") for _, reason, _ in events.written)
    assert outcome.again

    # When the rebooted kubelet posts the node's status
    posted(cluster, "9", boot_id=AFTER)
    outcome, _ = look(step, watching, REBOOT_AT + timedelta(minutes=12))

    # Then the cordon is lifted until the retirement's drain, whose lifecycle follows on the record
    assert (outcome.then, outcome.again) == (None, False)
    assert cluster.cordoned == set()
    assert (NODE, "UncordonedUntilMaintenance", "Normal") in events.written
    assert "successor" in outcome.changes["extra"]


def test_a_node_whose_rebooted_kubelet_renewed_its_lease_before_its_status_stays_cordoned_until_it_posts() -> (
    None
):
    # Given a node drained for a reboot that EC2 lists completed as the instance boots: Ready on the old boot, its
    # Ready heartbeat the old kubelet's last status report
    cluster, events, _, watching, step = watching_after_reboot()
    old_beat = REBOOT_AT - timedelta(minutes=2)
    posted(cluster, "8", ready_heartbeat_at=old_beat)
    cluster.leases[NODE] = LAST_RENEWAL
    outcome, watching = look(step, watching, REBOOT_AT + timedelta(minutes=11))
    assert outcome.again

    # When the rebooted kubelet renews the Lease before its first status post (its node Lease controller runs
    # beside its status loop), the node still saying the old boot and heartbeat
    cluster.leases[NODE] = REBOOT_AT + timedelta(minutes=11, seconds=30)
    outcome, watching = look(step, watching, REBOOT_AT + timedelta(minutes=12))

    # Then the node stays cordoned
    assert (outcome.again, outcome.delay) == (True, MAINTENANCE_POLL_SECONDS)
    assert cluster.cordoned == {NODE}

    # When a kubelet of that boot posts the node's status (a heartbeat since the first look)
    posted(cluster, "9", ready_heartbeat_at=REBOOT_AT + timedelta(minutes=12, seconds=10))
    outcome, _ = look(step, watching, REBOOT_AT + timedelta(minutes=13))

    # Then the cordon is lifted
    assert (outcome.then, outcome.again) == (None, False)
    assert cluster.cordoned == set()
    assert (NODE, "UncordonedAfterMaintenance", "Normal") in events.written


def test_a_node_whose_spot_instance_resumed_from_hibernation_is_uncordoned_before_its_kubelets_next_status_report() -> (
    None
):
    # Given our node on boot BEFORE, its kubelet's last status report 2 minutes before the interruption, drained for a
    # Spot interruption that hibernates its instance, its cleanup done
    cluster = cordoned_for_spot()
    old_beat = STRIKES - timedelta(minutes=2)
    cluster.nodes[NODE] = cluster.nodes[NODE].model_copy(
        update={"boot_id": BEFORE, "ready_heartbeat_at": old_beat}
    )
    ec2 = Ec2Maintenance(known={INSTANCE: "running"})
    record = drained_for_spot("hibernate")
    events = FakeEvents()
    step = spot_cleanup(cluster, record, ec2, events)
    _, watching = look(step, record, STRIKES - timedelta(seconds=5))

    # When EC2 hibernates it, then resumes it within the node monitor's grace: the same boot, the node Ready with
    # nothing changed for its kubelet to post before its next report (3 minutes on), its Lease renewed every 10 s
    ec2.known = {INSTANCE: "stopped"}
    cluster.leases[NODE] = STRIKES
    _, watching = look(step, watching, STRIKES + timedelta(seconds=30))
    ec2.known = {INSTANCE: "running"}
    lifted = None
    for seconds in range(60, 180, 10):
        cluster.leases[NODE] = STRIKES + timedelta(seconds=seconds - 5)
        outcome, watching = look(step, watching, STRIKES + timedelta(seconds=seconds))
        if not outcome.again:
            lifted = seconds
            break

    # Then the cordon is lifted once the Lease has been renewed on for 40 s on that boot (found back at 60 s, renewed
    # since at 70 s), not at that next report
    assert lifted == 110
    assert cluster.cordoned == set()
    assert (NODE, "UncordonedAfterSpotInterruption", "Normal") in events.written
