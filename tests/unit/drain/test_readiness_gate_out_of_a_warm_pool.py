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


# The node of an instance in a Running warm pool: its kubelet, running since the instance was launched into the pool
# an hour before, posted its status (a new Ready heartbeat) since, as it does every 5 minutes with nothing changed
RAN_ALL_ALONG = BEFORE_THE_POOL.model_copy(update={"ready_heartbeat_at": T0 - timedelta(minutes=3)})


@pytest.mark.parametrize("looked_after", [12, 15, 25])
def test_a_running_pools_renewal_found_at_a_late_first_look_opens_the_gate_when_ec2_shows_no_start_since(
    looked_after: int,
) -> None:
    # Given a launch out of a Running warm pool begun ``looked_after`` s before the gate's first look (past
    # BACK_NO_SOONER: an address step asked again, a throttled function), its kubelet renewing every 10 s (last 2 s
    # before the look: since the start), its node's status posted 3 minutes before, and EC2 showing the instance
    # running, last started (its LaunchTime) an hour before, as it went into the pool
    cluster = KubeletCluster(nodes={NODE: RAN_ALL_ALONG}, first=T0 - timedelta(seconds=602))
    renewed = cluster.lease_renewed_at(NODE)
    assert renewed is not None
    assert renewed > T0 - timedelta(seconds=looked_after)
    ec2 = Dns(started=T0 - timedelta(hours=1))
    gate = gate_on(cluster, ec2, readiness(readiness_timeout_seconds="120", drain_poll_seconds="5"))
    record = launching(origin="WarmPool", started_at=T0 - timedelta(seconds=looked_after))

    # When the gate polls every 5 s
    opened = poll_gate(gate, cluster, until=120, joins={}, record=record)

    # Then it opens at its first look: the node's status was posted since the instance's last start, so its Ready is
    # the running kubelet's own (before: a renewal since the start with no status since was taken for a kubelet booted
    # out of a Stopped pool, and the launch waited 40 s on the same boot)
    assert opened == 0


@pytest.mark.parametrize("started_before_the_launch", [0, 20])
def test_a_stopped_pools_renewal_found_at_a_late_first_look_still_waits_for_the_booted_kubelets_status(
    started_before_the_launch: int,
) -> None:
    # Given a launch out of a Stopped warm pool whose gate first looks 15 s in: EC2 started the instance (its
    # LaunchTime) ``started_before_the_launch`` s before the launch began, its booted kubelet renews its Lease from
    # 5 s into the launch on, while the node still says Ready with the heartbeat of its last post before the stop
    stopped_node = BEFORE_THE_POOL.model_copy(update={"ready_heartbeat_at": T0 - timedelta(seconds=90)})
    cluster = KubeletCluster(
        nodes={NODE: stopped_node},
        first=T0 - timedelta(seconds=600),
        stopped=T0 - timedelta(seconds=80),
        restarted=T0 + timedelta(seconds=5),
    )
    ec2 = Dns(started=T0 - timedelta(seconds=started_before_the_launch))
    gate = gate_on(cluster, ec2, readiness(readiness_timeout_seconds="120", drain_poll_seconds="5"))
    record = launching(origin="WarmPool", started_at=T0 - timedelta(seconds=15))

    # When the gate polls every 5 s, the booted kubelet never posting its status
    opened = poll_gate(gate, cluster, until=120, joins={}, record=record)

    # Then it does not open on that renewal: the node's last status is older than the instance's start, the old boot's
    # (only the 40 s on the same boot, the resumed hibernation's allowance, opens it)
    assert opened >= 40
