"""The launch readiness gate finds its node by name, and lists every node only where names may differ."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import timedelta

import pytest

from nodecycle.domain.completion import CompleteAction
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.drain.cleanup import POOL_IDLE, POOL_IDLE_POLL_SECONDS, POOL_WATCH
from nodecycle.domain.errors import TransientError
from nodecycle.domain.launch import SCAN_EVERY, ReadinessGate
from nodecycle.domain.model import Step, Transition, record_id
from nodecycle.domain.nodes import NodeFinder
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.cluster import NodeInfo
from tests.support.fakes import T0, LaunchingGroup
from tests.support.readiness_gates import (
    Dns,
    GoingDown,
    KubeletCluster,
    RefusingCluster,
    gate_in,
    gate_on,
    gate_until_it_ends,
    poll_gate,
)
from tests.unit.drain.test_drain_steps import (
    INSTANCE,
    NODE,
    FakeCluster,
    FakeEvents,
    FakeSlots,
    cleanup,
    launching,
    node,
    readiness,
    terminating,
)
from tests.unit.foundation.test_engine import World


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


def test_a_node_that_is_still_registering_is_looked_up_by_name_not_by_listing_every_node() -> None:
    # Given a launching instance whose node registers, under its DNS name, 90 s later (polls every 5 s)
    cluster = LookupsCluster()
    gate = gate_on(cluster, Dns(), readiness(readiness_timeout_seconds="600", drain_poll_seconds="5"))

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
    gate = gate_on(cluster, Dns(), readiness(readiness_timeout_seconds="600", drain_poll_seconds="5"))

    # When the gate polls
    opened = poll_gate(gate, cluster, until=600, joins={0: node(name="worker-17")})

    # Then it lists the nodes only after two minutes, then once in six polls, and finds the node by its id
    assert 120 <= opened <= 150
    assert cluster.looks.count(True) == 1


def test_past_its_first_two_minutes_the_gate_lists_every_node_once_in_six_polls() -> None:
    # Given a gate of ten minutes polled every 5 s, for a node that never shows up by its DNS name
    cluster = LookupsCluster()
    gate = gate_on(cluster, Dns(), readiness(readiness_timeout_seconds="600", drain_poll_seconds="5"))

    # When the gate polls for five minutes
    poll_gate(gate, cluster, until=300, joins={})

    # Then it looks by name alone for two minutes (24 polls), then lists every node once in six polls:
    # a gate waiting out its timeout lists the whole cluster a few times a minute, not at every poll
    assert len(cluster.looks) == 60
    assert [i for i, scan in enumerate(cluster.looks) if scan] == [24, 30, 36, 42, 48, 54]


def test_the_gate_lists_every_node_at_its_last_look_before_giving_up() -> None:
    # Given a gate shorter than the time a node is given to register under its DNS name
    cluster = LookupsCluster()
    gate = gate_on(cluster, Dns(), readiness(readiness_timeout_seconds="60", drain_poll_seconds="5"))

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
    gate = gate_on(
        cluster, LateDns(unknown_for=2), readiness(readiness_timeout_seconds="600", drain_poll_seconds="5")
    )

    # When the gate polls until the node is Ready
    opened = poll_gate(gate, cluster, until=600, joins={10: node()})

    # Then it found the node by name once EC2 knew the instance: no two-minute wait for a scan
    assert opened == 10
    assert not any(cluster.looks)


@pytest.mark.parametrize("phase", range(10))
def test_an_instance_from_a_running_warm_pool_is_in_service_within_a_lease_renewal(phase: int) -> None:
    # Given an instance taken out of a Running warm pool at T0: its kubelet never stopped and renews its Lease
    # every 10 s, the last time ``phase`` s before T0; its node object says Ready, as it has all along (its
    # Ready condition posted minutes ago: the kubelet posts node status every 5 minutes)
    cluster = KubeletCluster(nodes={NODE: node()}, first=T0 - timedelta(seconds=60 + phase))
    gate = gate_on(cluster, Dns(), readiness(readiness_timeout_seconds="60", drain_poll_seconds="5"))

    # When the gate polls (every 5 s)
    opened = poll_gate(gate, cluster, until=60, joins={}, record=launching(origin="WarmPool"))

    # Then it opens by the first poll after the kubelet's next renewal at the latest: not a wait for a node status
    # post, nor a timeout
    assert opened <= 10


def test_a_node_still_ready_from_before_its_instance_stopped_waits_for_its_kubelet() -> None:
    # Given an instance taken out of a Stopped warm pool at T0, 20 s after its stop: its node object still says
    # Ready (the node controller has not marked it Unknown yet), its kubelet's Lease was last renewed before the
    # stop; the kubelet, started again by the boot, renews it from T0 + 42 s
    cluster = KubeletCluster(
        nodes={NODE: node()},
        first=T0 - timedelta(seconds=300),
        stopped=T0 - timedelta(seconds=20),
        restarted=T0 + timedelta(seconds=42),
    )
    gate = gate_on(cluster, Dns(), readiness(readiness_timeout_seconds="120", drain_poll_seconds="5"))

    # When the gate polls (every 5 s)
    opened = poll_gate(gate, cluster, until=120, joins={}, record=launching(origin="WarmPool"))

    # Then it waits while the instance boots, and opens at its first poll after the kubelet's first renewal
    assert opened == 45


def test_a_node_without_a_lease_waits_for_one_and_the_gate_times_out_if_none_comes() -> None:
    # Given a node that says Ready but has no Lease: no kubelet has run since it was deleted
    cluster = FakeCluster(nodes={NODE: node()}, leases={NODE: None})
    gate = gate_on(cluster, Dns(), readiness(readiness_timeout_seconds="60", drain_poll_seconds="5"))
    record = launching()

    # When the gate polls
    first = gate(record, T0)
    last = gate(record.model_copy(update=dict(first.changes)), T0 + timedelta(seconds=60))

    # Then it waits, and gives up at its timeout with the configured result, the node not Ready for the launch
    assert first.again
    assert (last.then, last.changes["result"], last.changes["outcome"]) == (
        Step.COMPLETE,
        ActionResult.ABANDON,
        "node-not-ready",
    )


def test_a_lease_the_role_may_not_read_leaves_the_gate_to_the_ready_condition_and_says_so_on_the_node() -> (
    None
):
    # Given a deployment whose RBAC predates the Lease rule: the API server refuses the read (403)
    refused = 'leases.coordination.k8s.io "ip-10-0-1-10" is forbidden'
    cluster = FakeCluster(nodes={NODE: node(uid="node-uid")}, leases_refused=refused)
    events = FakeEvents()
    gate = gate_on(cluster, Dns(), readiness(), events)

    # When the gate finds the node Ready
    outcome = gate(launching(), T0)

    # Then it opens, as it did before it read Leases, and a Warning on the node says why and what to apply
    assert (outcome.again, outcome.changes["outcome"]) == (False, "node-ready")
    assert events.written == [(NODE, "NodeLeaseUnreadable", "Warning")]
    assert refused in events.messages[0]
    assert "nodecycle rbac" in events.messages[0]


@dataclass
class FailingCluster(FakeCluster):
    """An API server that answers every read of the gate with a 500 (as the adapter raises it)."""

    def find_node(
        self, instance_id: str, private_dns_name: str | None, *, scan: bool = True
    ) -> NodeInfo | None:
        raise TransientError(f"reading node {private_dns_name}: HTTP 500 etcdserver: request timed out")


def test_an_api_server_that_fails_every_read_does_not_hold_the_launch_past_the_readiness_timeout() -> None:
    # Given a launch whose gate (60 s, polls every 5 s) finds the API server failing every read (500s)
    world = World()
    cluster = FailingCluster()
    gate = gate_on(cluster, Dns(), readiness(readiness_timeout_seconds="60", drain_poll_seconds="5"))

    # When its messages come, each when it is due, until the gate ends (or the action's global timeout)
    record, _ = gate_until_it_ends(world, gate)

    # Then the gate ends at its timeout, with the configured result and why, after at most one retry's backoff
    # (at most 180 s, times a jitter of 1.5): not hours later at the global timeout
    assert (record.result, record.outcome) == (ActionResult.ABANDON, "readiness-unknown")
    assert record.completed_at is not None
    assert record.completed_at <= T0 + timedelta(seconds=60 + 270)
    assert [result for _, result in world.autoscaling.completed] == [ActionResult.ABANDON]


def test_an_api_server_that_refuses_every_read_settles_the_launch_at_the_readiness_timeout_not_dead_lettered() -> (
    None
):
    # Given a launch whose gate (60 s, polls every 5 s) finds the API server refusing every read of nodes (403)
    world = World()
    cluster = RefusingCluster()
    gate = gate_in(world, cluster, Dns(), readiness(readiness_timeout_seconds="60", drain_poll_seconds="5"))

    # When its messages come, each when it is due, until the gate ends (a refusal raised by a step would be
    # retried, then dead-lettered)
    record, _ = gate_until_it_ends(world, gate)

    # Then the gate looks again at its poll's pace (RBAC may be mended meanwhile) and ends at its timeout with
    # the configured result, saying why; the timeout's alarm tells an operator
    assert (record.result, record.outcome) == (ActionResult.ABANDON, "readiness-refused")
    assert record.completed_at is not None
    assert record.completed_at <= T0 + timedelta(seconds=65)
    assert "forbidden" in (record.last_error or "")
    assert world.metrics.counts["ReadinessTimeouts"] == 1


@pytest.mark.parametrize("state", ["shutting-down", "terminated", "stopping", "stopped"])
def test_an_instance_that_goes_down_while_its_launch_waits_ends_the_gate_without_a_readiness_timeout(
    state: str,
) -> None:
    # Given a launch whose gate (3 minutes, polls every 5 s) waits for a node that never joins, and whose
    # instance is terminated (Auto Scaling ends the launch action then) or stopped 40 s in
    world = World()
    cluster = FakeCluster()
    ec2 = GoingDown(world, at=T0 + timedelta(seconds=40), state=state)
    gate = gate_in(world, cluster, ec2, readiness(readiness_timeout_seconds="180", drain_poll_seconds="5"))
    world.autoscaling.active = state not in ("shutting-down", "terminated")

    # When its messages come, each when it is due, until the gate ends
    record, polls = gate_until_it_ends(world, gate)

    # Then the gate ends within a few polls of the instance going down, with the failure policy's result (a
    # stopped instance's action is still Auto Scaling's to settle), no readiness timeout counted (its alarm pages
    # an operator for an instance that is simply gone), EC2 asked once in SCAN_EVERY polls at most
    assert (record.result, record.outcome) == (ActionResult.ABANDON, "instance-down")
    assert record.completed_at is not None
    assert record.completed_at <= T0 + timedelta(seconds=40 + 5 * SCAN_EVERY)
    assert world.metrics.counts.get("ReadinessTimeouts", 0) == 0
    assert 1 <= ec2.asked <= polls // SCAN_EVERY + 1


class Throttling(Dns):
    """EC2 throttling every question about the instance's state (DescribeInstances: RequestLimitExceeded, which
    the adapter raises as a TransientError), as it does an account whose calls burst past their rate for a while:
    counts the questions."""

    def __init__(self) -> None:
        self.asked = 0

    def states(self, instance_ids: Collection[str]) -> dict[str, str]:
        self.asked += 1
        raise TransientError("DescribeInstances: RequestLimitExceeded (Request limit exceeded.)")


def test_a_throttled_question_about_the_instance_costs_the_gate_neither_its_look_nor_its_pace() -> None:
    # Given a launch whose gate (10 minutes, polls every 5 s) waits for a node that joins Ready 120 s in, and EC2
    # throttling every question about the instance's state meanwhile
    world = World()
    cluster = FakeCluster()
    ec2 = Throttling()
    gate = gate_in(world, cluster, ec2, readiness(readiness_timeout_seconds="600", drain_poll_seconds="5"))
    world.records.create(launching())
    engine = world.engine(
        {Step.READY_GATE: gate, Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics)}
    )

    # When its messages come, each when it is due, until the gate ends
    record = world.record()
    while record.step is Step.READY_GATE:
        world.clock.current = max(world.clock.current, record.due_at)
        if world.clock.current >= T0 + timedelta(seconds=120):
            cluster.now = world.clock.current
            cluster.nodes[NODE] = node()
        engine.handle(world.message(record.id))
        record = world.record()

    # Then the unanswered question leaves the look counted, as a refused one does: the gate opens at its first poll
    # after the node is Ready (no look retried with the engine's backoff, which grows to minutes), and EC2 is asked
    # once in SCAN_EVERY polls (at 25, 55, 85 and 115 s), not again at every look while it throttles
    assert (record.result, record.outcome) == (ActionResult.CONTINUE, "node-ready")
    assert record.completed_at == T0 + timedelta(seconds=120)
    assert world.metrics.counts.get("StepRetries", 0) == 0
    assert ec2.asked == 120 // (5 * SCAN_EVERY)


def test_the_gate_asks_ec2_nothing_of_an_instance_whose_node_is_ready() -> None:
    # Given a launch whose node is Ready at once
    world = World()
    cluster = FakeCluster(nodes={NODE: node()})
    ec2 = GoingDown(world, at=T0, state="terminated")
    gate = gate_in(world, cluster, ec2, readiness())

    # When the gate looks
    outcome = gate(launching(), T0)

    # Then it opens without a question about the instance's state (its node tells it runs)
    assert (outcome.again, outcome.changes["outcome"]) == (False, "node-ready")
    assert ec2.asked == 0


def test_a_node_back_from_a_running_warm_pool_is_uncordoned_as_its_launch_completes() -> None:
    # Given an instance that went into a warm pool whose instances keep running, its node kept cordoned and
    # marked released for that lifecycle, whose cleanup watches it once a minute (it has waited for long)
    world = World()
    went = terminating(Step.CLEANUP, node=NODE, destination="WarmPool")
    watching = went.model_copy(
        update={
            "extra": {POOL_WATCH: (T0 - timedelta(hours=1)).isoformat(), POOL_IDLE: True},
            "due_at": T0 + timedelta(seconds=POOL_IDLE_POLL_SECONDS),
        }
    )
    world.records.create(watching)
    cluster = FakeCluster(nodes={NODE: node(released_for=went.id)}, cordoned={NODE})
    # and a scale-out that takes it out of the pool: its launch action starts, its node Ready all along
    world.autoscaling.states[INSTANCE] = "Pending:Wait"
    launch = launching(origin="WarmPool", id=record_id(INSTANCE, Transition.LAUNCHING, "token"))
    world.records.create(launch)
    gate = ReadinessGate(
        finder=NodeFinder(cluster, Dns()),
        cluster=cluster,
        instances=Dns(),
        autoscaling=LaunchingGroup(),
        dispatcher=Dispatcher(
            records=world.records, queues=world.queues, clock=world.clock, metrics=world.metrics
        ),
        policy=readiness(),
        metrics=world.metrics,
        events=FakeEvents(),
    )
    engine = world.engine(
        {
            Step.READY_GATE: gate,
            Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics),
            Step.CLEANUP: cleanup(cluster, FakeSlots(), world.autoscaling),
        }
    )

    # When the launch's message comes, and every message it sends for now (none later than now) is handled
    engine.handle(world.message(launch.id))
    now = [sent for sent in world.queues.take() if sent.delay == 0]
    while now:
        for sent in now:
            engine.handle(sent.message)
        now = [sent for sent in world.queues.take() if sent.delay == 0]

    # Then the launch is completed (its instance in service) and its node is schedulable again by then: not at
    # the cleanup's next look, up to a minute later
    launched = world.records.get(launch.id)
    assert launched is not None
    assert launched.completed_at == T0
    assert cluster.cordoned == set()
    assert cluster.nodes[NODE].released_for is None


def test_a_forged_launch_ends_at_its_gate_s_first_run_not_at_the_readiness_timeout() -> None:
    # Given a launch recorded from a forged or replayed notification (EIP off, the gate on): Auto Scaling has
    # no such active action, and no node joins. Open, its record would count as the instance's known action
    # to the sweeper (neither kept alive nor adopted: the true action, its event lost, would time out)
    world = World()
    world.records.create(launching(verified_at=None))
    world.autoscaling.active = False
    cluster = LookupsCluster()
    gate = gate_on(cluster, Dns(), readiness())
    engine = world.engine(
        {Step.READY_GATE: gate, Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics)}
    )

    # When its first message comes
    engine.handle(world.message(world.record().id))

    # Then the gate never looked for a node and the lifecycle ended as unknown, completing nothing
    assert cluster.looks == []
    assert (world.record().outcome, world.record().finished) == ("unknown-action", True)
    assert world.autoscaling.completed == []


def test_a_true_launch_s_gate_costs_one_heartbeat_its_confirmation() -> None:
    # Given a true launch (EIP off, the gate on) whose node joins Ready 90 s in, within the hook's heartbeat
    # timeout: no heartbeat keeps it alive meanwhile
    world = World()
    world.records.create(launching(verified_at=None))
    cluster = LookupsCluster()
    gate = gate_on(cluster, Dns(), readiness())
    engine = world.engine(
        {Step.READY_GATE: gate, Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics)}
    )

    # When its messages come, each when it is due, the node Ready from 90 s on
    record = world.record()
    while not record.finished:
        world.clock.current = max(world.clock.current, record.due_at)
        if world.clock.current >= T0 + timedelta(seconds=90):
            cluster.now = world.clock.current
            cluster.nodes[NODE] = node()
        engine.handle(world.message(record.id))
        record = world.record()

    # Then it completed with CONTINUE after one heartbeat, the one that confirmed the action at the first run
    assert [result for _, result in world.autoscaling.completed] == [ActionResult.CONTINUE]
    assert len(world.autoscaling.heartbeats) == 1
    assert record.verified_at == T0
