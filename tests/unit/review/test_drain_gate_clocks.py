"""The launch readiness gate counts a Ready node only once its kubelet renewed its Lease since the launch began
(domain/launch.py). The renewTime is the kubelet's stamp; the launch's start is Auto Scaling's event time, taken in
by the intake function (capped at its clock). A Stopped warm pool's instance taken out within the node controller's
grace (40 s) finds its node still Ready from before the stop, its Lease last renewed before it: the rule is all that
tells that kubelet dead.

With the drain function's clock a minute off either way, the gate judges as on time (the first test). With the
intake function's clock a minute behind, every event's time is ahead of it and the intake times the lifecycle from
its own clock (a minute early, started_at == received_at): the gate then takes no single clock's word, and opens on
a renewal since its first look by both the start and the drain function's clock, or on a renewTime changed since
its first read of it (the other tests)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from nodecycle.domain.model import LifecycleEvent, LifecycleRecord, Transition
from nodecycle.domain.ports.lifecycle import Hook
from tests.support.fakes import T0, FakeAutoscaling, FakeClock, InMemoryRecords
from tests.support.readiness_gates import Dns, KubeletCluster, gate_on, poll_gate
from tests.unit.drain.test_drain_steps import NODE, launching, node, readiness
from tests.unit.foundation.test_intake import GROUP, HOOK, intake

OFF = timedelta(seconds=60)  # the function's clock over the true time (Auto Scaling's, the API server's)
STOPPED = T0 - timedelta(seconds=20)  # the instance stopped into its warm pool, its kubelet with it
RESTARTED = T0 + timedelta(seconds=42)  # the instance back (its launch began at T0) boots its kubelet again


def stopped_kubelet() -> KubeletCluster:
    """A node still Ready from before its instance stopped 20 s before the launch (T0), its kubelet renewing its
    Lease every 10 s until the stop, and again from T0 + 42 s (on the API server's clock, ``now``)."""
    return KubeletCluster(
        nodes={NODE: node()}, first=T0 - timedelta(seconds=300), stopped=STOPPED, restarted=RESTARTED
    )


class LeaseGoneTillRestart(KubeletCluster):
    """A node without a Lease until its kubelet starts again (``restarted``) and creates it."""

    def lease_renewed_at(self, node: str) -> datetime | None:
        return super().lease_renewed_at(node) if self.restarted and self.now >= self.restarted else None


def opened_at(
    cluster: KubeletCluster, started_at: datetime, lead: timedelta, received_at: datetime = T0
) -> float:
    """Seconds of true time from the launch (T0) at which the gate, polling every 5 s from T0 on a drain function
    whose clock runs ``lead`` ahead, opens for a launch the intake timed so; 120 when it does not."""
    gate = gate_on(cluster, Dns(), readiness(readiness_timeout_seconds="120", drain_poll_seconds="5"))
    record = launching(origin="WarmPool", started_at=started_at, received_at=received_at)
    return poll_gate(gate, cluster, until=120, joins={}, record=record, lead=lead)


def taken_in_by_an_intake_a_minute_behind() -> LifecycleRecord:
    """The record of a launch whose event says Auto Scaling's time T0, as an intake whose clock runs a minute
    behind takes it in."""
    token = "7b4c5d2e-1f3a-4b6c-8d9e-0a1b2c3d4e5f"
    clock = FakeClock(T0 - OFF)
    autoscaling = FakeAutoscaling(
        issued={token: None},
        hooks={(GROUP, HOOK): Hook(Transition.LAUNCHING, heartbeat_timeout=300)},
        clock=clock,
    )
    records = InMemoryRecords()
    event = LifecycleEvent(
        instance_id="i-0123456789abcdef0",
        transition=Transition.LAUNCHING,
        token=token,
        group=GROUP,
        hook=HOOK,
        started_at=T0,
        origin="WarmPool",
        delivery="sqs",
    )
    intake(autoscaling, records, clock).accept(event)
    (record,) = records.items.values()
    return record


@pytest.mark.parametrize(
    "received_at", [T0 + timedelta(seconds=2), T0], ids=["timed by auto scaling", "timed by the intake"]
)
@pytest.mark.parametrize("lead", [OFF, -OFF, timedelta(0)], ids=["drain ahead", "drain behind", "on time"])
def test_a_drain_function_whose_clock_runs_a_minute_off_judges_the_kubelet_as_on_time(
    lead: timedelta, received_at: datetime
) -> None:
    # Given an instance back from its Stopped warm pool, its launch begun at T0 (Auto Scaling's time, or the
    # intake's own clock, on time), its node Ready from before the stop; a drain function whose clock runs a
    # minute off

    # When the gate polls
    opened = opened_at(stopped_kubelet(), T0, lead, received_at)

    # Then it waits for the kubelet the boot starts again (a dead one is not taken for alive), and opens at its
    # first poll after that kubelet's first renewal (a live one is not taken for dead)
    assert opened == 45


def test_an_intake_whose_clock_runs_a_minute_behind_does_not_have_a_dead_kubelet_taken_for_alive() -> None:
    # Given the launch's event, Auto Scaling's time T0, taken in by an intake function whose clock runs a minute
    # behind
    record = taken_in_by_an_intake_a_minute_behind()

    # When the gate (on a drain function on time) polls an instance back from its Stopped warm pool, its node
    # Ready from before the stop
    opened = opened_at(stopped_kubelet(), record.started_at, timedelta(0), record.received_at)

    # Then it waits for the kubelet the boot starts again, as with an intake on time
    assert opened == 45, (
        f"opened at {opened} s on a Lease renewed at {STOPPED - T0} (started_at {record.started_at})"
    )


@pytest.mark.parametrize("phase", [0, 3, 7, 9])
def test_an_intake_whose_clock_runs_a_minute_behind_has_a_live_kubelet_in_service_within_a_lease_renewal(
    phase: int,
) -> None:
    # Given the launch of an instance taken out of a Running warm pool at T0, taken in by an intake function whose
    # clock runs a minute behind: its kubelet never stopped, its last renewal ``phase`` s before T0
    record = taken_in_by_an_intake_a_minute_behind()
    cluster = KubeletCluster(nodes={NODE: node()}, first=T0 - timedelta(seconds=60 + phase))

    # When the gate polls (every 5 s, on a drain function on time)
    opened = opened_at(cluster, record.started_at, timedelta(0), record.received_at)

    # Then it opens by the first poll after the kubelet's next renewal at the latest, as with an intake on time
    assert opened <= 10


def test_a_lease_created_after_the_gate_first_read_none_opens_it_for_a_launch_the_intake_timed() -> None:
    # Given the launch of an instance back from its Stopped warm pool whose node says Ready but has no Lease (the
    # node controller's GC took it with a node deleted and recreated): the kubelet the boot starts creates it at
    # T0 + 42 s; the launch taken in by an intake a minute behind
    record = taken_in_by_an_intake_a_minute_behind()
    cluster = LeaseGoneTillRestart(
        nodes={NODE: node()}, first=T0 - timedelta(seconds=300), stopped=STOPPED, restarted=RESTARTED
    )

    # When the gate polls
    opened = opened_at(cluster, record.started_at, timedelta(0), record.received_at)

    # Then it opens at its first poll after the Lease is created
    assert opened == 45
