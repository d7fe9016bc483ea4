"""The launch readiness gate finds its node by name, and lists every node only where names may differ."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import timedelta

from nodecycle.domain.launch import ReadinessGate
from nodecycle.domain.nodes import NodeFinder
from nodecycle.domain.ports.cluster import NodeInfo
from tests.support.fakes import T0, FakeMetrics
from tests.unit.drain.test_drain_steps import NODE, FakeCluster, launching, node, readiness


@dataclass
class LookupsCluster(FakeCluster):
    """Finds a node as FakeCluster does (as the adapter: by the DNS name at every look, by provider id only
    when a scan is allowed); records which looks were scans."""

    looks: list[bool] = field(default_factory=list)

    def find_node(
        self, instance_id: str, private_dns_name: str | None, *, scan: bool = True
    ) -> NodeInfo | None:
        self.looks.append(scan)
        return super().find_node(instance_id, private_dns_name, scan=scan)


class Dns:
    def private_dns_name(self, instance_id: str) -> str | None:
        return NODE

    def alive(self, instance_ids: Collection[str]) -> set[str]:
        return set(instance_ids)

    def states(self, instance_ids: Collection[str]) -> dict[str, str]:
        return dict.fromkeys(instance_ids, "running")


def poll_gate(
    gate: ReadinessGate, cluster: LookupsCluster, *, until: float, joins: dict[float, NodeInfo]
) -> float:
    """Run the gate at each poll until it opens or ``until`` seconds have passed; ``joins`` registers nodes at
    the given seconds. Returns when it opened (or ``until``)."""
    record = launching()
    now = T0
    while (now - T0).total_seconds() < until:
        for at, joined in list(joins.items()):
            if (now - T0).total_seconds() >= at:
                cluster.nodes[joined.name] = joined
                del joins[at]
        outcome = gate(record, now)
        if not outcome.again:
            return (now - T0).total_seconds()
        record = record.model_copy(update=dict(outcome.changes))
        now += timedelta(seconds=outcome.delay)
    return until


def test_a_node_that_is_still_registering_is_looked_up_by_name_not_by_listing_every_node() -> None:
    # Given a launching instance whose node registers, under its DNS name, 90 s later (polls every 5 s)
    cluster = LookupsCluster()
    gate = ReadinessGate(
        finder=NodeFinder(cluster, Dns()),
        policy=readiness(readiness_timeout_seconds="600", drain_poll_seconds="5"),
        metrics=FakeMetrics(),
    )

    # When the gate polls until the node is Ready
    opened = poll_gate(gate, cluster, until=600, joins={90: node()})

    # Then it opened at the first poll after the node joined, having never listed every node
    assert opened == 90
    assert not any(cluster.looks)


def test_a_node_named_otherwise_than_its_instance_is_found_by_provider_id_once_it_had_time_to_register() -> (
    None
):
    # Given a cluster whose node names are not the instances' DNS names, and a node that joins at once
    cluster = LookupsCluster()
    gate = ReadinessGate(
        finder=NodeFinder(cluster, Dns()),
        policy=readiness(readiness_timeout_seconds="600", drain_poll_seconds="5"),
        metrics=FakeMetrics(),
    )

    # When the gate polls
    opened = poll_gate(gate, cluster, until=600, joins={0: node(name="worker-17")})

    # Then it lists the nodes only after two minutes, then once in six polls, and finds the node by its id
    assert 120 <= opened <= 150
    assert cluster.looks.count(True) == 1


def test_the_gate_lists_every_node_at_its_last_look_before_giving_up() -> None:
    # Given a gate shorter than the time a node is given to register under its DNS name
    cluster = LookupsCluster()
    gate = ReadinessGate(
        finder=NodeFinder(cluster, Dns()),
        policy=readiness(readiness_timeout_seconds="60", drain_poll_seconds="5"),
        metrics=FakeMetrics(),
    )

    # When its node, named otherwise, never shows up by name
    opened = poll_gate(gate, cluster, until=120, joins={0: node(name="worker-17")})

    # Then the last poll before the timeout lists every node, and finds it
    assert opened == 55
    assert cluster.looks == [False] * 11 + [True]


class LateDns(Dns):
    """EC2 right after RunInstances (eventually consistent): the instance is not described for a while."""

    def __init__(self, unknown_for: int) -> None:
        self.unknown_for = unknown_for
        self.asked = 0

    def private_dns_name(self, instance_id: str) -> str | None:
        self.asked += 1
        return None if self.asked <= self.unknown_for else NODE


def test_an_instance_ec2_does_not_describe_yet_is_asked_about_again_not_taken_as_nameless() -> None:
    # Given a launching instance that EC2 does not describe at the gate's first two polls, whose node joins
    # under its DNS name 10 s in (polls every 5 s)
    cluster = LookupsCluster()
    gate = ReadinessGate(
        finder=NodeFinder(cluster, LateDns(unknown_for=2)),
        policy=readiness(readiness_timeout_seconds="600", drain_poll_seconds="5"),
        metrics=FakeMetrics(),
    )

    # When the gate polls until the node is Ready
    opened = poll_gate(gate, cluster, until=600, joins={10: node()})

    # Then it found the node by name once EC2 knew the instance: no two-minute wait for a scan
    assert opened == 10
    assert not any(cluster.looks)
