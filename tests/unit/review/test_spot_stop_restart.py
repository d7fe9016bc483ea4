"""A Spot interruption that stops or hibernates its instance rather than terminating it (a persistent Spot request's
instance, ``instance-action`` ``stop`` or ``hibernate`` in EC2's warning): EC2 starts the instance again when capacity
comes back, and its node, Ready again, kept the cordon the drain left on it for good. No one lifted it: the cleanup of
a disruption without a hook keeps its cordon (the instance goes), the stop's state change frees annotations only, and
the next interruption found the node cordoned already, so its own cleanup had nothing of its own to lift either. The
capacity came back and took no pods, silently."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from nodecycle.domain.drain.cleanup import (
    MAINTENANCE_POLL_SECONDS,
    SPOT_IDLE_POLL_SECONDS,
    SPOT_RESTART_UNSEEN_AFTER,
    SPOT_WATCH_LIMIT,
    Cleanup,
)
from nodecycle.domain.model import KEPT_ON_NODE, SPOT_ACTION, LifecycleRecord, Step
from tests.support.fakes import FakeAutoscaling
from tests.unit.drain.test_drain_steps import (
    INSTANCE,
    NODE,
    T0,
    Ec2Maintenance,
    FakeCluster,
    FakeEvents,
    FakeSlots,
    cleanup,
    node,
    spot,
)

STRIKES = T0 + timedelta(minutes=2)  # the interruption (spot(): warned of at T0)


def drained_for_spot(action: str | None) -> LifecycleRecord:
    """A Spot interruption's lifecycle at its cleanup, the node cordoned by it and drained; its warning's
    instance-action noted when it stops or hibernates the instance."""
    extra: dict[str, object] = {"set_on_node": {"cordon": True, "lb": False}}
    if action is not None:
        extra[SPOT_ACTION] = action
    return spot(Step.CLEANUP, node=NODE, zone="eu-west-1a", drain_started_at=T0, group="", extra=extra)


def cordoned_for_spot() -> FakeCluster:
    progress = json.dumps({"instance": INSTANCE, "transition": "spot-interruption", "token": "token"})
    claimed = node(owner="stack-a", in_progress=progress, unschedulable=True)
    return FakeCluster(nodes={NODE: claimed}, cordoned={NODE})


def spot_cleanup(
    cluster: FakeCluster, record: LifecycleRecord, ec2: Ec2Maintenance, events: FakeEvents | None = None
) -> Cleanup:
    """The cleanup step of ``record``'s drain, its node's slot held for it, against ``cluster`` and ``ec2``."""
    return cleanup(
        cluster, FakeSlots(holders={NODE}, held_for={NODE: record.id}), FakeAutoscaling(), events, ec2
    )


def set_ready(cluster: FakeCluster, ready: bool) -> None:
    """The node's Ready condition as its kubelet (or the node controller) writes it: a new resourceVersion."""
    current = cluster.nodes[NODE]
    version = str(int(current.resource_version or "0") + 1)
    cluster.nodes[NODE] = current.model_copy(update={"ready": ready, "resource_version": version})


@pytest.mark.parametrize("action", ["stop", "hibernate"])
def test_a_node_drained_for_a_spot_stop_is_uncordoned_once_ec2_starts_the_instance_again(action: str) -> None:
    # Given our node, drained for a Spot interruption that stops (or hibernates) its instance, the instance still
    # running as the drain ends, a few seconds before the interruption strikes
    cluster, ec2 = cordoned_for_spot(), Ec2Maintenance(known={INSTANCE: "running"})
    record = drained_for_spot(action)
    slots, events = FakeSlots(holders={NODE}, held_for={NODE: record.id}), FakeEvents()
    step = cleanup(cluster, slots, FakeAutoscaling(), events, ec2)

    # When its cleanup runs
    first = step(record, STRIKES - timedelta(seconds=5))

    # Then the annotations go and the slot is given back, the cordon kept, and it looks again
    assert cluster.patches == [{"owner": None, "in_progress": None, "released_for": record.id}]
    assert (cluster.cordoned, slots.released) == ({NODE}, [NODE])
    assert first.again
    assert first.delay == MAINTENANCE_POLL_SECONDS

    # When it looks while EC2 has stopped the instance (its kubelet gone with it, the node NotReady)
    watching = record.model_copy(update=first.changes)
    ec2.known[INSTANCE] = "stopped"
    set_ready(cluster, False)
    stopped = step(watching, STRIKES + timedelta(minutes=1))

    # Then it stays cordoned, looked at again
    assert stopped.again
    assert cluster.cordoned == {NODE}

    # ...and so it does, looked at less often, for as long as the instance stays stopped (capacity may take days)
    watching = watching.model_copy(update=stopped.changes)
    idle = step(watching, STRIKES + timedelta(hours=5))
    assert (idle.again, idle.delay) == (True, SPOT_IDLE_POLL_SECONDS)
    watching = watching.model_copy(update=idle.changes)

    # When EC2 has started it again, its kubelet not back yet
    ec2.known[INSTANCE] = "running"
    assert step(watching, STRIKES + timedelta(hours=6)).again
    assert cluster.cordoned == {NODE}

    # ...and then with its node Ready again
    set_ready(cluster, True)
    lifted = step(watching, STRIKES + timedelta(hours=6, minutes=1))

    # Then what the lifecycle set on the node is lifted, its mark removed, and an Event tells so
    assert (lifted.then, lifted.again) == (None, False)
    assert cluster.patches[-1] == {"owner": None, "in_progress": None, "cordon": False}
    assert (cluster.cordoned, cluster.nodes[NODE].released_for) == (set(), None)
    assert (NODE, "UncordonedAfterSpotInterruption", "Normal") in events.written


def test_a_spot_instance_running_right_after_its_interruption_is_not_taken_for_started_again() -> None:
    # Given the watch after a Spot stop's drain, EC2 not having stopped the instance yet at its first looks
    cluster, ec2 = cordoned_for_spot(), Ec2Maintenance(known={INSTANCE: "running"})
    record = drained_for_spot("stop")
    step = spot_cleanup(cluster, record, ec2)
    watching = record.model_copy(update=step(record, STRIKES - timedelta(seconds=5)).changes)

    # When it looks while the instance still runs with its node Ready, moments after the interruption's time
    outcome = step(watching, STRIKES + timedelta(seconds=20))

    # Then the cordon stays: the stop may still come
    assert outcome.again
    assert cluster.cordoned == {NODE}

    # ...but an instance running, its node Ready, long after the interruption was stopped and started again between
    # two looks: uncordoned
    later = step(watching.model_copy(update=outcome.changes), STRIKES + SPOT_RESTART_UNSEEN_AFTER)
    assert not later.again
    assert cluster.cordoned == set()


@pytest.mark.parametrize("state", ["terminated", "shutting-down", None])
def test_a_stopped_spot_instance_that_ec2_terminates_instead_keeps_its_cordon(state: str | None) -> None:
    # Given the watch after a Spot stop's drain
    cluster, ec2 = cordoned_for_spot(), Ec2Maintenance(known={INSTANCE: "stopped"})
    record = drained_for_spot("stop")
    events = FakeEvents()
    step = spot_cleanup(cluster, record, ec2, events)
    watching = record.model_copy(update=step(record, STRIKES + timedelta(seconds=5)).changes)

    # When EC2 terminates the stopped instance (its request cancelled), or no longer lists it
    if state is None:
        ec2.known.clear()
    else:
        ec2.known[INSTANCE] = state
    outcome = step(watching, STRIKES + timedelta(hours=1))

    # Then the watch ends, the node left cordoned and marked released for the lifecycle (it is not coming back)
    assert not outcome.again
    assert cluster.cordoned == {NODE}
    assert cluster.nodes[NODE].released_for == record.id
    assert (NODE, "CordonKeptAfterSpotInterruption", "Normal") in events.written


def test_a_spot_instance_never_started_again_keeps_its_cordon_at_the_watchs_limit() -> None:
    cluster, ec2 = cordoned_for_spot(), Ec2Maintenance(known={INSTANCE: "stopped"})
    record = drained_for_spot("stop")
    events = FakeEvents()
    step = spot_cleanup(cluster, record, ec2, events)
    watching = record.model_copy(update=step(record, STRIKES + timedelta(seconds=5)).changes)

    outcome = step(watching, STRIKES + SPOT_WATCH_LIMIT + timedelta(seconds=1))

    assert not outcome.again
    assert cluster.cordoned == {NODE}
    assert (NODE, "CordonKeptAfterSpotInterruption", "Warning") in events.written


def test_a_spot_interruption_that_terminates_its_instance_is_not_watched() -> None:
    # (as before: the instance goes, its node keeps the cordon and the lifecycle ends at its cleanup)
    cluster, ec2 = cordoned_for_spot(), Ec2Maintenance(known={INSTANCE: "running"})
    record = drained_for_spot(None)
    step = spot_cleanup(cluster, record, ec2)
    outcome = step(record, STRIKES - timedelta(seconds=5))
    assert not outcome.again
    assert cluster.cordoned == {NODE}


def test_the_next_interruption_of_a_spot_instance_whose_watch_goes_on_takes_its_cordon_over() -> None:
    # Given the lifecycle of a Spot stop's drain, watching for its instance to run again
    cluster, ec2 = cordoned_for_spot(), Ec2Maintenance(known={INSTANCE: "running"})
    record = drained_for_spot("stop")
    step = spot_cleanup(cluster, record, ec2)
    watching = record.model_copy(update=step(record, STRIKES - timedelta(seconds=5)).changes)

    # When the next interruption's lifecycle starts over on the record
    later = spot(Step.ACQUIRE_SLOT, token="token-2", started_at=T0 + timedelta(hours=3))
    following = watching.followed_by(later)

    # Then it takes over what the one before it set on the node and kept there
    assert following.extra[KEPT_ON_NODE] == {"cordon": True, "lb": False}
