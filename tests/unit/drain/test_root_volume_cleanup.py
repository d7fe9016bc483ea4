"""The cleanup of a root volume replacement's drain (an instance refresh's ReplaceRootVolume: the terminate hook's
action, Origin and Destination the group). The instance reboots on its new volume and comes back under the same
node object, which no kubelet uncordons: the cordon is kept through the reboot and lifted once the instance is back
in service with its node Ready; kept for good when the replacement failed (Auto Scaling terminates the instance)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from nodecycle.domain.drain.cleanup import MAINTENANCE_POLL_SECONDS, ROOT_VOLUME_WATCH
from nodecycle.domain.drain.common import NODE_SEEN
from nodecycle.domain.model import GROUP, LifecycleRecord, Step
from nodecycle.domain.policy import ActionResult
from tests.support.fakes import T0, FakeAutoscaling
from tests.unit.drain.test_drain_steps import (
    INSTANCE,
    NODE,
    FakeCluster,
    FakeEvents,
    FakeSlots,
    cleanup,
    node,
    terminating,
)


def replaced() -> LifecycleRecord:
    """The terminate hook's lifecycle of a root volume replacement at its cleanup: the node cordoned (by it) and
    drained, the action completed."""
    return terminating(
        Step.CLEANUP,
        origin=GROUP,
        destination=GROUP,
        node=NODE,
        zone="eu-west-1a",
        drain_started_at=T0,
        completed_at=T0 + timedelta(minutes=2),
        result=ActionResult.CONTINUE,
        outcome="completed",
        extra={"set_on_node": {"cordon": True, "lb": False}},
    )


def cordoned_for_it() -> FakeCluster:
    """Our node, cordoned and annotated by that lifecycle."""
    progress = json.dumps({"instance": INSTANCE, "transition": "terminate", "token": "token"})
    claimed = node(owner="stack-a", in_progress=progress, unschedulable=True)
    return FakeCluster(nodes={NODE: claimed}, cordoned={NODE})


def test_the_node_stays_cordoned_through_the_reboot_and_is_uncordoned_once_its_instance_is_back_in_service() -> (
    None
):
    # Given our node, drained for its instance's root volume replacement, the action completed: the replacement
    # under way
    cluster = cordoned_for_it()
    record = replaced()
    autoscaling = FakeAutoscaling(states={INSTANCE: "ReplacingRootVolume:Proceed"})
    slots, events = FakeSlots(holders={NODE}, held_for={NODE: record.id}), FakeEvents()
    step = cleanup(cluster, slots, autoscaling, events)

    # When its cleanup runs
    first = step(record, T0 + timedelta(minutes=2))

    # Then the annotations go and the slot is given back, but the cordon stays, the node marked released for
    # the lifecycle, watched
    assert cluster.patches == [{"owner": None, "in_progress": None, "released_for": record.id}]
    assert (cluster.cordoned, slots.released) == ({NODE}, [NODE])
    assert (first.again, first.delay) == (True, MAINTENANCE_POLL_SECONDS)
    assert first.changes["extra"].get(ROOT_VOLUME_WATCH)
    watching = record.model_copy(update=first.changes)

    # When it looks while the instance reboots (its kubelet gone), then while the launch hook holds it with its
    # node Ready again
    cluster.nodes[NODE] = cluster.nodes[NODE].model_copy(update={"ready": False})
    rebooting = step(watching, T0 + timedelta(minutes=3))
    autoscaling.states[INSTANCE] = "Pending:Wait"
    cluster.nodes[NODE] = cluster.nodes[NODE].model_copy(update={"ready": True})
    held = step(watching, T0 + timedelta(minutes=4))

    # Then the cordon stays: the instance is not back in service yet
    assert (rebooting.again, held.again) == (True, True)
    assert cluster.cordoned == {NODE}

    # When the instance is in service again
    autoscaling.states[INSTANCE] = "InService"
    lifted = step(watching, T0 + timedelta(minutes=5))

    # Then what the lifecycle set on the node is lifted, its mark removed, and an Event tells so
    assert (lifted.then, lifted.again) == (None, False)
    assert cluster.patches[-1] == {"owner": None, "in_progress": None, "cordon": False}
    assert (cluster.cordoned, cluster.nodes[NODE].released_for) == (set(), None)
    assert (NODE, "UncordonedAfterRootVolumeReplacement", "Normal") in events.written


@pytest.mark.parametrize("state", ["Terminating:Wait", "Terminating:Proceed", None])
def test_a_node_whose_replacement_failed_stays_cordoned(state: str | None) -> None:
    # Given our node, drained for its instance's root volume replacement, watched
    cluster = cordoned_for_it()
    autoscaling, events = FakeAutoscaling(states={INSTANCE: "ReplacingRootVolume:Proceed"}), FakeEvents()
    step = cleanup(cluster, FakeSlots(holders={NODE}), autoscaling, events)
    record = replaced()
    watching = record.model_copy(update=step(record, T0 + timedelta(minutes=2)).changes)

    # When the replacement failed: Auto Scaling terminates the instance (or has)
    autoscaling.states = {INSTANCE: state} if state else {}
    done = step(watching, T0 + timedelta(minutes=5))

    # Then the watch ends with the node cordoned, still marked released for the lifecycle, and an Event tells why
    assert (done.then, done.again) == (None, False)
    assert (cluster.cordoned, cluster.nodes[NODE].released_for) == ({NODE}, record.id)
    assert (NODE, "CordonKeptAfterRootVolumeReplacement", "Normal") in events.written


def test_a_node_in_service_again_is_uncordoned_only_once_its_kubelet_posted_from_the_new_boot() -> None:
    # Given our node, drained for its instance's root volume replacement and watched, its kubelet's boot id read
    # before the reboot
    cluster = cordoned_for_it()
    cluster.nodes[NODE] = cluster.nodes[NODE].model_copy(update={"boot_id": "boot-1"})
    autoscaling, events = FakeAutoscaling(states={INSTANCE: "ReplacingRootVolume:Proceed"}), FakeEvents()
    step = cleanup(cluster, FakeSlots(holders={NODE}), autoscaling, events)
    record = replaced()
    watching = record.model_copy(update=step(record, T0 + timedelta(minutes=2)).changes)

    # When the instance is in service again (no launch hook holds it) while its node still says Ready as the kubelet
    # left it before the reboot (the node monitor marks it Unknown only after its grace, 40 s), the same boot id
    autoscaling.states[INSTANCE] = "InService"
    early = step(watching, T0 + timedelta(minutes=3))

    # Then the cordon stays: no kubelet runs there yet to take the pods sent to it
    assert early.again
    assert cluster.cordoned == {NODE}
    watching = watching.model_copy(update=early.changes)

    # When the rebooted kubelet posts its status: Ready, with the new boot's id
    cluster.nodes[NODE] = cluster.nodes[NODE].model_copy(
        update={"boot_id": "boot-2", "resource_version": "8"}
    )
    lifted = step(watching, T0 + timedelta(minutes=4))

    # Then the cordon is lifted
    assert (lifted.then, lifted.again) == (None, False)
    assert cluster.cordoned == set()
    assert (NODE, "UncordonedAfterRootVolumeReplacement", "Normal") in events.written


def test_a_cleanup_run_late_takes_the_boot_before_the_reboot_from_the_drains_last_read() -> None:
    # Given our node, drained for its instance's root volume replacement, the drain's last read of it before the
    # completion kept (boot-1); the cleanup runs late (a crash after the completion, the message delivered again):
    # the instance is back in service and its rebooted kubelet has posted the node Ready from boot-2
    cluster = cordoned_for_it()
    drained = cluster.nodes[NODE].model_copy(update={"boot_id": "boot-1"})
    cluster.nodes[NODE] = drained.model_copy(update={"boot_id": "boot-2", "resource_version": "8"})
    autoscaling, events = FakeAutoscaling(states={INSTANCE: "InService"}), FakeEvents()
    step = cleanup(cluster, FakeSlots(holders={NODE}), autoscaling, events)
    record = replaced()
    record = record.model_copy(update={"extra": {**record.extra, NODE_SEEN: drained.model_dump(mode="json")}})

    # When its cleanup runs
    done = step(record, T0 + timedelta(minutes=10))

    # Then the cordon is lifted at its first look: the kubelet is back from the reboot, not waited for again
    assert (done.then, done.again) == (None, False)
    assert cluster.cordoned == set()
    assert (NODE, "UncordonedAfterRootVolumeReplacement", "Normal") in events.written


def test_a_cleanup_run_late_with_no_read_from_before_the_reboot_lifts_the_cordon_once_the_lease_is_renewed() -> (
    None
):
    # Given our node, drained for its instance's root volume replacement, no read of it from before the reboot kept
    # (NODE_SEEN: none); the cleanup runs late (a crash after the completion, the message delivered again): the
    # instance is back in service and its rebooted kubelet has posted the node Ready from boot-2, which the cleanup
    # takes for the boot from before the reboot
    cluster = cordoned_for_it()
    cluster.nodes[NODE] = cluster.nodes[NODE].model_copy(update={"boot_id": "boot-2"})
    cluster.leases[NODE] = T0 + timedelta(minutes=9)
    autoscaling, events = FakeAutoscaling(states={INSTANCE: "InService"}), FakeEvents()
    step = cleanup(cluster, FakeSlots(holders={NODE}), autoscaling, events)
    record = replaced()
    first = step(record, T0 + timedelta(minutes=10))
    assert first.again
    watching = record.model_copy(update=first.changes)

    # When the watch looks again, the kubelet having renewed its Lease since
    cluster.leases[NODE] = T0 + timedelta(minutes=10, seconds=30)
    lifted = step(watching, T0 + timedelta(minutes=11))

    # Then the cordon is lifted: that kubelet is alive, its Ready its own (waited for a boot id that came already,
    # the cordon was kept for two days)
    assert (lifted.then, lifted.again) == (None, False)
    assert cluster.cordoned == set()
    assert (NODE, "UncordonedAfterRootVolumeReplacement", "Normal") in events.written
