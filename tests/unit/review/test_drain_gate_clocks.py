"""The launch readiness gate counts a Ready node only once its kubelet renewed its Lease since the launch began
(domain/launch.py: renewTime >= record.started_at - CLOCK_SKEW). The renewTime is the kubelet's stamp; the launch's
start is Auto Scaling's event time, taken in by the intake function (capped at its clock). A Stopped warm pool's
instance taken out within the node controller's grace (40 s) finds its node still Ready from before the stop, its
Lease last renewed before it: the rule is all that tells that kubelet dead.

With the drain function's clock a minute off either way, the gate judges as on time: its rule takes no ``now``
(the first test pins it). With the intake function's clock a minute behind, every event's time is ahead of it,
the intake times the lifecycle from its own clock (a minute early), and the gate takes a Lease renewed before the
stop for a kubelet running since the launch: the second test, a strict xfail (the fix belongs to the intake and the
gate: see its reason)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from nodecycle.domain.model import LifecycleEvent, Transition
from nodecycle.domain.ports.lifecycle import Hook
from tests.support.fakes import T0, FakeAutoscaling, FakeClock, InMemoryRecords
from tests.unit.drain.test_drain_steps import NODE, launching, node, readiness
from tests.unit.drain.test_readiness_gate import Dns, KubeletCluster, gate_on
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


def opened_at(cluster: KubeletCluster, started_at: datetime, lead: timedelta) -> float:
    """Seconds of true time from the launch (T0) at which the gate, polling every 5 s from T0 on a drain function
    whose clock runs ``lead`` ahead, opens; 120 when it does not."""
    gate = gate_on(cluster, Dns(), readiness(readiness_timeout_seconds="120", drain_poll_seconds="5"))
    record = launching(origin="WarmPool", started_at=started_at)
    true = T0
    while true < T0 + timedelta(seconds=120):
        cluster.now = true  # the API server's (and the kubelet's) clock
        outcome = gate(record, true + lead)
        if not outcome.again:
            return (true - T0).total_seconds()
        record = record.model_copy(update=dict(outcome.changes))
        true += timedelta(seconds=outcome.delay)
    return 120


@pytest.mark.parametrize("lead", [OFF, -OFF, timedelta(0)], ids=["drain ahead", "drain behind", "on time"])
def test_a_drain_function_whose_clock_runs_a_minute_off_judges_the_kubelet_as_on_time(
    lead: timedelta,
) -> None:
    # Given an instance back from its Stopped warm pool, its launch begun at T0 (Auto Scaling's time), its node
    # Ready from before the stop; a drain function whose clock runs a minute off

    # When the gate polls
    opened = opened_at(stopped_kubelet(), T0, lead)

    # Then it waits for the kubelet the boot starts again (a dead one is not taken for alive), and opens at its
    # first poll after that kubelet's first renewal (a live one is not taken for dead)
    assert opened == 45


@pytest.mark.xfail(
    strict=True,
    reason="an intake function whose clock runs behind times the launch from its own clock (domain/intake.py caps "
    "started_at at its now), and the gate (domain/launch.py) takes a Lease renewed before the stop for one renewed "
    "since the launch. Fix (launch.py): a start the intake timed from its own clock (started_at == received_at) is "
    "not a time to judge the kubelet's stamps by; for it the gate opens only on a renewal seen after its first look "
    "(two reads of the Lease, the kubelet's stamps only)",
)
def test_an_intake_whose_clock_runs_a_minute_behind_does_not_have_a_dead_kubelet_taken_for_alive() -> None:
    # Given the launch's event, Auto Scaling's time T0, taken in by an intake function whose clock runs a minute
    # behind
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

    # When the gate (on a drain function on time) polls an instance back from its Stopped warm pool, its node
    # Ready from before the stop
    opened = opened_at(stopped_kubelet(), record.started_at, timedelta(0))

    # Then it waits for the kubelet the boot starts again, as with an intake on time
    assert opened == 45, (
        f"opened at {opened} s on a Lease renewed at {STOPPED - T0} (started_at {record.started_at})"
    )
