"""The launch readiness gate of an instance taken out of a Hibernated or Stopped warm pool, its launch told with Origin
WarmPool: its node object is older than the launch and may still say Ready from before the pool (within the node
monitor's grace, 40 s), its Lease renewed last by the kubelet just before the instance went to sleep. That renewal is
older than the launch's start, by however little: a Lease stamped before the start counts only once it has changed
since the gate first read it, the clock allowance (CLOCK_SKEW) being no reason to take a sleeping kubelet for a live
one."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.support.fakes import T0
from tests.support.readiness_gates import Dns, KubeletCluster, gate_on, poll_gate
from tests.unit.drain.test_drain_steps import NODE, launching, node, readiness

# The node as its kubelet left it when the instance went into the pool: Ready, registered an hour before
BEFORE_THE_POOL = node(created_at=T0 - timedelta(hours=1), boot_id="the-boot-before-the-pool")
RESUMED = 15  # seconds after the launch began, the instance runs again and its kubelet renews its Lease


@pytest.mark.parametrize("slept_before", [1, 3, 5])
def test_a_lease_renewed_just_before_the_instance_went_to_sleep_does_not_open_the_gate(
    slept_before: int,
) -> None:
    # Given a launch out of a warm pool begun at T0, the kubelet's last renewal ``slept_before`` s before it (a short
    # stay in the pool), its node still Ready from before, and the kubelet running again RESUMED s into the launch
    cluster = KubeletCluster(
        nodes={NODE: BEFORE_THE_POOL},
        first=T0 - timedelta(seconds=600 + slept_before),
        stopped=T0 - timedelta(seconds=slept_before - 0.5),
        restarted=T0 + timedelta(seconds=RESUMED),
    )
    assert cluster.lease_renewed_at(NODE) == T0 - timedelta(seconds=slept_before)
    gate = gate_on(cluster, Dns(), readiness(readiness_timeout_seconds="120", drain_poll_seconds="5"))

    # When the gate polls every 5 s
    opened = poll_gate(gate, cluster, until=120, joins={}, record=launching(origin="WarmPool"))

    # Then it opens at its first poll after the kubelet's renewal once it runs again, not at its first look (the launch
    # completed, the instance put in service while it was still asleep)
    assert opened == RESUMED


def test_a_kubelet_whose_clock_runs_behind_opens_the_gate_at_its_next_renewal() -> None:
    # Given an instance out of a Running warm pool at T0 whose kubelet's clock runs 4 s behind, renewing every 10 s:
    # its renewals stamped 4 s early, the one at T0 + 2 s stamped T0 - 2 s
    cluster = KubeletCluster(nodes={NODE: BEFORE_THE_POOL}, first=T0 - timedelta(seconds=602))
    gate = gate_on(cluster, Dns(), readiness(readiness_timeout_seconds="120", drain_poll_seconds="5"))

    # When the gate polls every 5 s, its first look at T0 (the renewal of T0 - 2 s read), then at 5 s, 10 s
    opened = poll_gate(gate, cluster, until=120, joins={}, record=launching(origin="WarmPool"))

    # Then it opens by its first look after the next renewal (stamped T0 + 8 s) at the latest: a renewal's wait at most
    assert opened <= 10


@pytest.mark.parametrize("looked_after", [2, 5, 9])
def test_a_running_pools_renewal_since_the_launch_found_at_a_first_look_soon_after_it_opens_the_gate(
    looked_after: int,
) -> None:
    # Given a launch out of a Running warm pool begun ``looked_after`` s before the gate's first look (the time the
    # event, the intake and the address step take), its kubelet renewing every 10 s and its last renewal a second
    # into the launch: since the start, the node's status unchanged since it went into the pool (a kubelet posts an
    # unchanged status every 5 minutes)
    cluster = KubeletCluster(
        nodes={NODE: BEFORE_THE_POOL}, first=T0 - timedelta(seconds=600 + looked_after - 1)
    )
    assert cluster.lease_renewed_at(NODE) == T0 - timedelta(seconds=looked_after - 1)
    gate = gate_on(cluster, Dns(), readiness(readiness_timeout_seconds="120", drain_poll_seconds="5"))
    record = launching(origin="WarmPool", started_at=T0 - timedelta(seconds=looked_after))

    # When the gate polls every 5 s
    opened = poll_gate(gate, cluster, until=120, joins={}, record=record)

    # Then it opens at its first look: no Stopped or Hibernated pool's instance starts, boots and renews its Lease
    # within a renewal interval of its launch's start, so that renewal is a live kubelet's (before: taken for a
    # booted one that had not posted its status yet, the launch waited 40 s on the same boot)
    assert opened == 0
