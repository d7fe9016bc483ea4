"""The launch readiness gate of an instance whose root volume was just replaced (an instance refresh with the
ReplaceRootVolume strategy): the instance rebooted on its new volume before its launch action began, under the same
node object, which stays Ready for the node monitor's grace (40 s) with the Lease the old kubelet last renewed. Only
a renewal after the gate's first read is the rebooted kubelet's."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from nodecycle.domain.model import GROUP
from tests.support.fakes import T0
from tests.support.readiness_gates import Dns, KubeletCluster, gate_on, poll_gate
from tests.unit.drain.test_drain_steps import NODE, launching, node, readiness

REBOOTED = T0 - timedelta(
    seconds=1
)  # the replacement's reboot: the old kubelet gone, a second before the launch
BACK = 20  # seconds after the launch began, the rebooted kubelet runs (creates its first renewal)


@pytest.mark.parametrize("last_renewal", [3, 9], ids=["renewed 3 s before", "renewed 9 s before"])
def test_the_gate_after_a_root_volume_replacement_waits_for_the_rebooted_kubelet(last_renewal: int) -> None:
    # Given a launch back from a root volume replacement (from the group to the group) begun at T0, its node still
    # Ready from before the reboot, the old kubelet's last Lease renewal ``last_renewal`` seconds before T0 (it
    # renewed every 10 s until the reboot), the rebooted kubelet back BACK seconds after T0
    cluster = KubeletCluster(
        nodes={NODE: node()},
        first=T0 - timedelta(seconds=300 + last_renewal),
        stopped=REBOOTED,
        restarted=T0 + timedelta(seconds=BACK),
    )
    gate = gate_on(cluster, Dns(), readiness(readiness_timeout_seconds="120", drain_poll_seconds="5"))
    record = launching(origin=GROUP, destination=GROUP, started_at=T0, received_at=T0 + timedelta(seconds=1))

    # When the gate polls every 5 s
    opened = poll_gate(gate, cluster, until=120, joins={}, record=record)

    # Then it opens at its first poll after the rebooted kubelet's first renewal, not on the old kubelet's
    assert opened == BACK


def test_the_gate_of_a_launch_told_without_origin_on_a_node_older_than_it_waits_for_a_renewal_after_its_first_read() -> (
    None
):
    # Given a launch told by the queue without Origin and Destination (its instance in Pending:Wait, as after a root
    # volume replacement or a new instance), begun at T0, and its node an object registered long before (the
    # instance's own, from before its reboot), still Ready, its Lease last renewed 3 s before T0 by a kubelet gone
    # a second before; the rebooted kubelet back BACK seconds after T0
    cluster = KubeletCluster(
        nodes={NODE: node(created_at=T0 - timedelta(hours=1))},
        first=T0 - timedelta(seconds=303),
        stopped=REBOOTED,
        restarted=T0 + timedelta(seconds=BACK),
    )
    gate = gate_on(cluster, Dns(), readiness(readiness_timeout_seconds="120", drain_poll_seconds="5"))
    record = launching(origin=None, destination=None, started_at=T0, received_at=T0 + timedelta(seconds=1))

    # When the gate polls every 5 s
    opened = poll_gate(gate, cluster, until=120, joins={}, record=record)

    # Then it opens only once that kubelet renewed the Lease, not on the renewal of the kubelet before the reboot
    assert opened == BACK


def test_the_gate_of_a_new_instance_opens_on_its_kubelets_first_renewal_as_before() -> None:
    # Given a new instance's launch begun at T0, its node registered 20 s later, its kubelet renewing its Lease from
    # then on
    cluster = KubeletCluster(nodes={}, first=T0 + timedelta(seconds=20))
    gate = gate_on(cluster, Dns(), readiness(readiness_timeout_seconds="120", drain_poll_seconds="5"))
    record = launching(origin=None, destination=None, started_at=T0, received_at=T0 + timedelta(seconds=1))

    # When the gate polls every 5 s
    joined = node(created_at=T0 + timedelta(seconds=20))
    opened = poll_gate(gate, cluster, until=120, joins={20: joined}, record=record)

    # Then it opens at its first look at the Ready node
    assert opened == 20


OLD_BOOT, NEW_BOOT = "boot-before-the-reboot", "boot-after-the-reboot"


@pytest.mark.parametrize(
    "last_report",
    [timedelta(minutes=4), timedelta(seconds=6)],
    ids=["4 minutes before", "6 s before: more than the clock skew allowed, its instance went down since"],
)
def test_the_gate_after_a_root_volume_replacement_waits_for_the_rebooted_kubelets_status_not_its_lease(
    last_report: timedelta,
) -> None:
    # Given a launch back from a root volume replacement begun at T0, its node still Ready from before the reboot (the
    # old boot's id, the old kubelet's last status report ``last_report`` before T0), the rebooted kubelet renewing
    # the Lease from 5 s after T0 on but posting the node's status (the new boot's id, a new heartbeat) only 20 s
    # after T0
    before = node(boot_id=OLD_BOOT, ready_heartbeat_at=T0 - last_report)
    cluster = KubeletCluster(
        nodes={NODE: before},
        first=T0 - timedelta(seconds=303),
        stopped=REBOOTED,
        restarted=T0 + timedelta(seconds=5),
    )
    gate = gate_on(cluster, Dns(), readiness(readiness_timeout_seconds="120", drain_poll_seconds="5"))
    record = launching(origin=GROUP, destination=GROUP, started_at=T0, received_at=T0 + timedelta(seconds=1))
    posted = before.model_copy(update={"boot_id": NEW_BOOT, "ready_heartbeat_at": T0 + timedelta(seconds=20)})

    # When the gate polls every 5 s
    opened = poll_gate(gate, cluster, until=120, joins={20: posted}, record=record)

    # Then it opens at its first poll after that status, not at the first renewal of the rebooted kubelet's Lease,
    # nor on the old kubelet's heartbeat
    assert opened == 20


def test_the_gate_after_a_root_volume_replacement_opens_on_a_status_posted_before_its_first_read() -> None:
    # Given a launch back from a root volume replacement begun at T0, whose rebooted kubelet posted the node's status
    # (the new boot's id, a heartbeat since the launch began) and renewed the Lease by the gate's first read, at T0
    cluster = KubeletCluster(nodes={NODE: node(boot_id=NEW_BOOT, ready_heartbeat_at=T0)}, first=T0)
    gate = gate_on(cluster, Dns(), readiness(readiness_timeout_seconds="120", drain_poll_seconds="5"))
    record = launching(origin=GROUP, destination=GROUP, started_at=T0, received_at=T0 + timedelta(seconds=1))

    # When the gate polls every 5 s
    opened = poll_gate(gate, cluster, until=120, joins={}, record=record)

    # Then it opens once the Lease is renewed since its first read, the boot id the same as then
    assert opened == 10


@pytest.mark.parametrize(
    ("heartbeat", "started"),
    [
        (T0 - timedelta(seconds=3), T0),
        (T0, T0 + timedelta(milliseconds=800)),
    ],
    ids=["a kubelet clock 3 s behind", "a heartbeat cut to the second"],
)
def test_the_gate_after_a_root_volume_replacement_takes_a_status_posted_as_the_launch_began_by_the_kubelets_clock(
    heartbeat: datetime, started: datetime
) -> None:
    # Given a launch back from a root volume replacement begun at ``started`` (Auto Scaling's clock, to the
    # millisecond), whose rebooted kubelet posted the node's status (the new boot's id) and renewed the Lease by the
    # gate's first read, its Ready heartbeat stamped as it began by the kubelet's own clock (3 s behind Auto
    # Scaling's), or the same instant cut to the second (a lastHeartbeatTime is a metav1.Time: whole seconds)
    cluster = KubeletCluster(nodes={NODE: node(boot_id=NEW_BOOT, ready_heartbeat_at=heartbeat)}, first=T0)
    gate = gate_on(cluster, Dns(), readiness(readiness_timeout_seconds="120", drain_poll_seconds="5"))
    record = launching(
        origin=GROUP, destination=GROUP, started_at=started, received_at=started + timedelta(seconds=1)
    )

    # When the gate polls every 5 s, the kubelet posting no other status meanwhile (its next report is 5 minutes away)
    opened = poll_gate(gate, cluster, until=120, joins={}, record=record)

    # Then it opens once the Lease is renewed since its first read, as for a heartbeat stamped after the launch began
    # by Auto Scaling's clock: not at its timeout, the instance abandoned and replaced under ABANDON
    assert opened == 10
