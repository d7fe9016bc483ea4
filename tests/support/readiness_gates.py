"""What the tests of the launch readiness gate (nodecycle.domain.launch) share: EC2 as the gate asks it (the
instance's DNS name and state), API servers that refuse its reads or whose kubelet renews a Lease on the test's
clock, and the gate built on the unit tests' fakes, polled by itself or run by the step engine until it ends."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

from nodecycle.domain.completion import CompleteAction
from nodecycle.domain.launch import ReadinessGate
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.nodes import NodeFinder
from nodecycle.domain.policy import ReadinessPolicy
from nodecycle.domain.ports.cluster import NodeInfo, Refused
from tests.support.fakes import T0, FakeAutoscaling, FakeMetrics, LaunchingGroup
from tests.unit.drain.test_drain_steps import NODE, FakeCluster, FakeEvents, launching, wakes_to_nowhere
from tests.unit.foundation.test_engine import World


class Dns:
    """EC2 for a running instance whose private DNS name is NODE's, last started ``started`` (its LaunchTime; None:
    not told, the gate judges its node by the cluster alone)."""

    started: datetime | None = None  # (for the subclasses that set up their own)

    def __init__(self, started: datetime | None = None) -> None:
        self.started = started

    def private_dns_name(self, instance_id: str) -> str | None:
        return NODE

    def last_started(self, instance_id: str) -> datetime | None:
        return self.started

    def alive(self, instance_ids: Collection[str]) -> set[str]:
        return set(instance_ids)

    def states(self, instance_ids: Collection[str]) -> dict[str, str]:
        return dict.fromkeys(instance_ids, "running")


class GoingDown(Dns):
    """EC2 for an instance that is terminated or stopped ``at`` (by the test's clock) while its launch waits:
    counts the gate's questions about its state."""

    def __init__(self, world: World, at: datetime, state: str) -> None:
        self.world, self.at, self.state = world, at, state
        self.asked = 0

    def states(self, instance_ids: Collection[str]) -> dict[str, str]:
        self.asked += 1
        state = self.state if self.world.clock.now() >= self.at else "running"
        return dict.fromkeys(instance_ids, state)


@dataclass
class RefusingCluster(FakeCluster):
    """An API server that refuses the gate's reads of nodes (403: a role without get and list on nodes)."""

    def find_node(
        self, instance_id: str, private_dns_name: str | None, *, scan: bool = True
    ) -> NodeInfo | None:
        raise Refused(
            f'nodes "{private_dns_name}" is forbidden: User "nodecycle" cannot get resource "nodes"'
        )


@dataclass
class KubeletCluster(FakeCluster):
    """A node whose kubelet renews its Lease every 10 s from ``first`` on, as the API server's clock (``now``)
    runs; stopped from ``stopped`` to ``restarted`` (its Lease stays at the last renewal meanwhile)."""

    first: datetime = T0
    stopped: datetime | None = None
    restarted: datetime | None = None

    def lease_renewed_at(self, node: str) -> datetime | None:
        if node not in self.nodes:
            return None
        running_since = self.first
        if self.restarted is not None and self.now >= self.restarted:
            running_since = self.restarted
        elif self.stopped is not None and self.now >= self.stopped:
            return self._renewed(running_since, self.stopped)
        return self._renewed(running_since, self.now)

    @staticmethod
    def _renewed(since: datetime, until: datetime) -> datetime:
        return since + timedelta(seconds=(until - since).total_seconds() // 10 * 10)


def gate_on(
    cluster: FakeCluster,
    dns: Dns,
    policy: ReadinessPolicy,
    events: FakeEvents | None = None,
    metrics: FakeMetrics | None = None,
    autoscaling: FakeAutoscaling | None = None,
) -> ReadinessGate:
    """The gate of a launch on ``cluster``, EC2 ``dns`` naming and describing its instance, Auto Scaling
    (``autoscaling``) holding it in Pending:Wait unless told otherwise."""
    return ReadinessGate(
        finder=NodeFinder(cluster, dns),
        cluster=cluster,
        instances=dns,
        autoscaling=LaunchingGroup() if autoscaling is None else autoscaling,
        dispatcher=wakes_to_nowhere(),
        policy=policy,
        metrics=FakeMetrics() if metrics is None else metrics,
        events=events or FakeEvents(),
    )


def gate_in(world: World, cluster: FakeCluster, ec2: Dns, policy: ReadinessPolicy) -> ReadinessGate:
    """The gate as ``gate_on`` builds it, counting its metrics in ``world``'s (a readiness timeout, say)."""
    return gate_on(cluster, ec2, policy, metrics=world.metrics)


def poll_gate(
    gate: ReadinessGate,
    cluster: FakeCluster,
    *,
    until: float,
    joins: dict[float, NodeInfo],
    record: LifecycleRecord | None = None,
    lead: timedelta = timedelta(0),
) -> float:
    """Run the gate at each poll until it opens or ``until`` seconds have passed; ``joins`` registers nodes at
    the given seconds; the drain function's clock runs ``lead`` ahead of the API server's. Returns when it opened
    (or ``until``), in seconds of the API server's time."""
    record = record or launching()
    now = T0
    while (now - T0).total_seconds() < until:
        cluster.now = now
        for at, joined in list(joins.items()):
            if (now - T0).total_seconds() >= at:
                cluster.nodes[joined.name] = joined
                del joins[at]
        outcome = gate(record, now + lead)
        if not outcome.again:
            return (now - T0).total_seconds()
        record = record.model_copy(update=dict(outcome.changes))
        now += timedelta(seconds=outcome.delay)
    return until


def gate_until_it_ends(world: World, gate: ReadinessGate) -> tuple[LifecycleRecord, int]:
    """A launch's lifecycle through ``gate``, each message handled when it is due, until the gate ends: the
    record then, and how many messages the gate took."""
    world.records.create(launching())
    engine = world.engine(
        {Step.READY_GATE: gate, Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics)}
    )
    record = world.record()
    polls = 0
    while record.step is Step.READY_GATE:
        world.clock.current = max(world.clock.current, record.due_at)
        engine.handle(world.message(record.id))
        polls += 1
        record = world.record()
    return record, polls
