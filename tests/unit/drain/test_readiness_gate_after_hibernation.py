"""The launch readiness gate of an instance resumed from a Hibernated warm pool, its launch told by the queue without
Origin and Destination: no boot (the node's boot id stays), its node object older than the launch and still Ready from
before the hibernation when it slept within the node monitor's grace (40 s), its kubelet renewing its Lease again once
it runs but posting its unchanged status only at its next report (nodeStatusReportFrequency, 5 minutes)."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.model import GROUP
from tests.support.fakes import T0
from tests.support.readiness_gates import Dns, KubeletCluster, gate_on, poll_gate
from tests.unit.drain.test_drain_steps import NODE, launching, node, readiness

BOOT = "the-boot-before-the-hibernation"
SLEPT = T0 - timedelta(
    seconds=3
)  # the hibernation: the kubelet's last renewal before it, 3 s before the launch
RESUMED = (
    15  # seconds after the launch began, the instance resumes and its kubelet runs on (renews its Lease)
)
# The node as the kubelet left it: Ready, its last status report 2 minutes before the launch (its next due 3 minutes on)
ASLEEP = node(created_at=T0 - timedelta(hours=1), boot_id=BOOT, ready_heartbeat_at=T0 - timedelta(minutes=2))


def test_the_gate_of_a_launch_without_origin_opens_on_a_kubelet_resumed_on_the_same_boot_before_its_next_report() -> (
    None
):
    # Given a launch told without Origin begun at T0, its node from before the hibernation, Ready on its boot, whose
    # kubelet renews the Lease again from RESUMED seconds on but posts no status within the gate's timeout
    cluster = KubeletCluster(
        nodes={NODE: ASLEEP},
        first=T0 - timedelta(seconds=303),
        stopped=SLEPT,
        restarted=T0 + timedelta(seconds=RESUMED),
    )
    gate = gate_on(cluster, Dns(), readiness(readiness_timeout_seconds="120", drain_poll_seconds="5"))
    record = launching(origin=None, destination=None, started_at=T0, received_at=T0 + timedelta(seconds=1))

    # When the gate polls every 5 s
    opened = poll_gate(gate, cluster, until=300, joins={}, record=record)

    # Then it opens once the Lease has been renewed on for 40 s on that boot (its first renewal seen at 15 s, again at
    # 55 s), not at the readiness timeout (the launch abandoned, a good instance replaced)
    assert opened == RESUMED + 40


def test_the_gate_of_a_launch_without_origin_never_takes_the_ready_of_an_instance_still_asleep() -> None:
    # Given a launch told without Origin begun at T0, its node still Ready from before the hibernation on its boot (the
    # node monitor's grace not over), and its kubelet asleep: its Lease never renewed since 3 s before the launch
    cluster = KubeletCluster(nodes={NODE: ASLEEP}, first=T0 - timedelta(seconds=303), stopped=SLEPT)
    gate = gate_on(cluster, Dns(), readiness(readiness_timeout_seconds="600", drain_poll_seconds="5"))
    record = launching(origin=None, destination=None, started_at=T0, received_at=T0 + timedelta(seconds=1))

    # When the gate polls every 5 s for 5 minutes
    opened = poll_gate(gate, cluster, until=300, joins={}, record=record)

    # Then it never opens
    assert opened == 300


def test_the_gate_of_a_launch_without_origin_waits_for_a_rebooted_kubelets_status_posted_within_40_s() -> (
    None
):
    # Given a launch told without Origin begun at T0 (a stopped pool's instance started, a root volume replaced), its
    # node Ready from before the reboot on the old boot, the rebooted kubelet renewing the Lease from 5 s on but
    # posting the node's status (the new boot's id) only 35 s after T0
    cluster = KubeletCluster(
        nodes={NODE: ASLEEP},
        first=T0 - timedelta(seconds=303),
        stopped=SLEPT,
        restarted=T0 + timedelta(seconds=5),
    )
    gate = gate_on(cluster, Dns(), readiness(readiness_timeout_seconds="120", drain_poll_seconds="5"))
    record = launching(origin=None, destination=None, started_at=T0, received_at=T0 + timedelta(seconds=1))
    posted = ASLEEP.model_copy(
        update={"boot_id": "the-new-boot", "ready_heartbeat_at": T0 + timedelta(seconds=35)}
    )

    # When the gate polls every 5 s
    opened = poll_gate(gate, cluster, until=120, joins={35: posted}, record=record)

    # Then it opens on that status, not on the Lease of the rebooted kubelet nor on the Ready from before the reboot
    assert opened == 35


def test_the_gate_after_a_root_volume_replacement_never_takes_the_same_boot_for_a_kubelet_running_on() -> (
    None
):
    # Given a launch back from a root volume replacement (it always reboots) begun at T0, its node Ready on the boot
    # from before, the kubelet renewing the Lease from 5 s on but posting no status within the gate's timeout
    cluster = KubeletCluster(
        nodes={NODE: ASLEEP},
        first=T0 - timedelta(seconds=303),
        stopped=SLEPT,
        restarted=T0 + timedelta(seconds=5),
    )
    gate = gate_on(cluster, Dns(), readiness(readiness_timeout_seconds="600", drain_poll_seconds="5"))
    record = launching(origin=GROUP, destination=GROUP, started_at=T0, received_at=T0 + timedelta(seconds=1))

    # When the gate polls every 5 s for 2 minutes
    opened = poll_gate(gate, cluster, until=120, joins={}, record=record)

    # Then it waits for the rebooted kubelet's status, as before
    assert opened == 120
