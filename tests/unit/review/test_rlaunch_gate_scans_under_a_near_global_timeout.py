"""The launch readiness gate lists every node only once the node has had time to register under its DNS name (two
minutes of looks), also when its deadline is cut short by the hook's global timeout (a readiness timeout longer
than the action may live: a short heartbeat timeout, or a gate that starts late in its action's life, after a long
wait for an address). The gate took its start for its deadline less the readiness timeout: cut short, that start
lay before the gate's first look, and the gate listed the whole cluster at its first look and every six polls after,
for a node that registers under its DNS name within a minute (one GET each look)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.support.fakes import T0
from tests.support.readiness_gates import Dns, gate_on, poll_gate
from tests.unit.drain.test_drain_steps import launching, node, readiness
from tests.unit.drain.test_readiness_gate import LookupsCluster


@pytest.mark.parametrize(
    "global_timeout",
    [timedelta(hours=48), timedelta(minutes=50)],
    ids=["deadline-of-its-own", "deadline-cut-by-the-global-timeout"],
)
def test_a_node_registering_under_its_dns_name_within_a_minute_is_never_listed_for(
    global_timeout: timedelta,
) -> None:
    # Given a gate of an hour (polls every 5 s) for a node that registers under its DNS name 60 s in, its action's
    # global timeout 48 hours away, or 50 minutes (a hook of a 30 s heartbeat timeout)
    cluster = LookupsCluster()
    gate = gate_on(cluster, Dns(), readiness(readiness_timeout_seconds="3600", drain_poll_seconds="5"))
    record = launching(global_deadline=T0 + global_timeout)

    # When the gate polls until the node is Ready
    opened = poll_gate(gate, cluster, until=600, joins={60: node()}, record=record)

    # Then it opened at the first poll after the node joined, having found it by name: no list of every node
    assert opened == 60
    assert [look for look, scan in enumerate(cluster.looks) if scan] == []


def test_a_gate_cut_short_by_the_global_timeout_lists_every_node_once_in_six_polls_after_two_minutes() -> (
    None
):
    # Given a gate whose deadline the global timeout cuts short, for a node that never shows up by its DNS name
    cluster = LookupsCluster()
    gate = gate_on(cluster, Dns(), readiness(readiness_timeout_seconds="3600", drain_poll_seconds="5"))
    record = launching(global_deadline=T0 + timedelta(minutes=50))

    # When the gate polls for five minutes
    poll_gate(gate, cluster, until=300, joins={}, record=record)

    # Then it lists every node as a gate of its own deadline does: from two minutes in, once in six polls
    assert [look for look, scan in enumerate(cluster.looks) if scan] == [24, 30, 36, 42, 48, 54]
