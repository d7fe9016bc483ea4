"""The launch readiness gate on the sandbox API server, run by the step engine on the test's clock: a worker killed
between the gate's look and CompleteLifecycleAction (before the call, or after it landed), and a node name reused
by a stale node of a terminated instance while the launch's own node registers under its instance id."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.adapters.kube.eks_access import EksCluster
from nodecycle.adapters.kube.events import KubeEvents
from nodecycle.domain.completion import CompleteAction
from nodecycle.domain.engine import Handled
from nodecycle.domain.launch import ReadinessGate
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.nodes import NodeFinder
from nodecycle.domain.policy import ActionResult
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import drain_server, eks_describing
from tests.support.fakes import LaunchingGroup
from tests.support.readiness_gates import Dns
from tests.unit.drain.test_drain_steps import INSTANCE, NODE, launching, readiness, wakes_to_nowhere
from tests.unit.foundation.test_engine import World

POLL = 10
GRACE = timedelta(minutes=3)  # the World engine's resume grace
OLD_INSTANCE = "i-0fedcba9876543210"  # the terminated instance whose node kept the name


class Killed(BaseException):
    """The worker dies (a Lambda timeout, an out-of-memory kill): nothing of the invocation's catches it."""


class KilledAroundTheCall:
    """The COMPLETE step, its first run killed before CompleteLifecycleAction is called, or right after it
    landed (its answer lost with the worker)."""

    def __init__(self, complete: CompleteAction, *, after_the_call: bool) -> None:
        self._complete = complete
        self._after = after_the_call
        self.killed = False

    def __call__(self, record: LifecycleRecord, now: object) -> object:
        if self.killed:
            return self._complete(record, now)  # type: ignore[arg-type]
        self.killed = True
        if self._after:
            self._complete(record, now)  # type: ignore[arg-type]
        raise Killed


@pytest.fixture
def server() -> Iterator[KubeServer]:
    # kubelets renewing their Leases every 0.5 s: a Ready node's kubelet is seen running since the launch began
    with drain_server({"nodes": []}, node_lease_renew_seconds=0.5) as kube:
        yield kube


@pytest.fixture
def gate(server: KubeServer) -> Iterator[tuple[World, ReadinessGate]]:
    # (the engine's redelivery: a crash after a commit is repaired by a watch once the resume grace has passed)
    world = World(redelivery=GRACE.total_seconds() + 2)
    with eks_describing(server):
        access = EksCluster("sandbox")
        cluster = KubeCluster(access.api_client)
        yield (
            world,
            ReadinessGate(
                finder=NodeFinder(cluster, Dns()),
                cluster=cluster,
                instances=Dns(),
                autoscaling=LaunchingGroup(),
                dispatcher=wakes_to_nowhere(),
                policy=readiness(readiness_timeout_seconds="600", drain_poll_seconds=str(POLL)),
                metrics=world.metrics,
                events=KubeEvents(access.api_client, owner="nodecycle"),
            ),
        )


@pytest.mark.parametrize("after_the_call", [False, True], ids=["before-the-call", "after-the-call"])
def test_a_worker_killed_between_the_gates_look_and_the_completion_is_repaired_by_redelivery(
    server: KubeServer, gate: tuple[World, ReadinessGate], after_the_call: bool
) -> None:
    # (holds: this test only) Given a launch whose node is Ready, and a worker killed in the completion that
    # follows the gate's look in the same invocation
    world, ready_gate = gate
    server.add_node(NODE, instance_id=INSTANCE, zone="eu-west-1a")
    server.settle()  # (the node lifecycle controller lifts the not-ready taint a node registers with)
    world.records.create(launching())
    complete = KilledAroundTheCall(
        CompleteAction(world.autoscaling, world.metrics), after_the_call=after_the_call
    )
    engine = world.engine({Step.READY_GATE: ready_gate, Step.COMPLETE: complete})
    first = world.message(world.record().id)
    with pytest.raises(Killed):
        engine.handle(first)
    assert world.record().step is Step.COMPLETE  # the gate's look committed; its next message never sent
    assert world.queues.take() == []

    # When the queue delivers the killed invocation's message again (after its visibility timeout), then the
    # watch it leaves once it is due
    world.clock.current += timedelta(seconds=60)
    assert engine.handle(first) is Handled.WATCHING
    (watch,) = world.queues.take()
    world.clock.current += timedelta(seconds=watch.delay)
    assert engine.handle(watch.message) is Handled.RESENT
    (resent,) = world.queues.take()
    handled = engine.handle(resent.message)

    # Then the completion runs again and the action is settled once with CONTINUE (the run after a landed call
    # finds it settled: harmless), before its heartbeat deadline: nothing expired
    record = world.record()
    assert handled is Handled.DONE
    assert (record.result, record.outcome) == (ActionResult.CONTINUE, "node-ready")
    assert [result for _, result in world.autoscaling.completed] == [ActionResult.CONTINUE]
    assert world.metrics.counts.get("LifecycleActionsExpired", 0) == 0


def test_a_stale_ready_node_under_the_instances_name_never_opens_the_gate_of_the_new_instance(
    server: KubeServer, gate: tuple[World, ReadinessGate]
) -> None:
    # (holds: this test only) Given the instance's DNS name still held by the node of a terminated instance (a
    # private IP reused before the node lifecycle controller removed it), Ready with its Lease renewed, and the
    # launch's own node registered under the instance id (a hostname override), not Ready yet
    _, ready_gate = gate
    server.add_node(NODE, instance_id=OLD_INSTANCE, zone="eu-west-1a")
    server.add_node(INSTANCE, instance_id=INSTANCE, zone="eu-west-1a", ready=False)
    record = launching()
    now = record.started_at

    # When the gate polls for a while
    for _ in range(10):
        outcome = ready_gate(record, now)
        # Then the stale node never opens it: its provider id is another instance's
        assert outcome.again, outcome.changes
        record = record.model_copy(update=dict(outcome.changes))
        now += timedelta(seconds=POLL)

    # And once the launch's own node is Ready, the next look opens it, on that node
    server.set_node_ready(INSTANCE, True)
    server.settle()  # (and the node lifecycle controller lifts its not-ready taint)
    outcome = ready_gate(record, now)
    assert (outcome.again, outcome.changes.get("outcome"), outcome.changes.get("node")) == (
        False,
        "node-ready",
        INSTANCE,
    )


def test_duplicate_and_reordered_gate_messages_settle_the_launch_once(
    server: KubeServer, gate: tuple[World, ReadinessGate]
) -> None:
    # (holds: this test only) Given a launch whose node registered, not Ready yet, and whose gate looked once
    world, ready_gate = gate
    server.add_node(NODE, instance_id=INSTANCE, zone="eu-west-1a", ready=False)
    world.records.create(launching())
    engine = world.engine(
        {Step.READY_GATE: ready_gate, Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics)}
    )
    first = world.message(world.record().id)
    assert engine.handle(first) is Handled.RAN
    (poll,) = world.queues.take()

    # When the first message comes again late (SQS delivers at least once), the node turns Ready, the next poll
    # is delivered twice, and the watch the late one left comes last
    world.clock.current += timedelta(seconds=POLL / 2)
    assert engine.handle(first) is Handled.WATCHING
    (watch,) = world.queues.take()
    server.set_node_ready(NODE, True)
    server.settle()  # (and the node lifecycle controller lifts its not-ready taint)
    world.clock.current += timedelta(seconds=poll.delay)
    handled = [engine.handle(poll.message), engine.handle(poll.message)]
    world.clock.current += timedelta(seconds=watch.delay)
    handled.append(engine.handle(watch.message))

    # Then the gate opened once and the action was completed once, with CONTINUE; the rest changed nothing
    assert handled == [Handled.DONE, Handled.FINISHED, Handled.FINISHED]
    record = world.record()
    assert (record.result, record.outcome) == (ActionResult.CONTINUE, "node-ready")
    assert [result for _, result in world.autoscaling.completed] == [ActionResult.CONTINUE]
    assert world.queues.take() == []


def test_a_flapping_node_opens_the_gate_only_at_a_look_that_finds_it_ready(
    server: KubeServer, gate: tuple[World, ReadinessGate]
) -> None:
    # (holds: this test only) Given a launch whose node flaps: NotReady, Ready for a moment between two looks,
    # NotReady again at the next look (its CNI restarting)
    _, ready_gate = gate
    server.add_node(NODE, instance_id=INSTANCE, zone="eu-west-1a", ready=False)
    record = launching()
    now = record.started_at
    outcomes = []
    for ready in (False, None, False, True):  # None: Ready, then NotReady again before the look
        if ready is None:
            server.set_node_ready(NODE, True)
            ready = False
        server.set_node_ready(NODE, ready)
        server.settle()  # (the node lifecycle controller's taints follow Ready)

        # When the gate looks at each state
        outcome = ready_gate(record, now)
        outcomes.append((outcome.again, outcome.changes.get("outcome")))
        record = record.model_copy(update=dict(outcome.changes))
        now += timedelta(seconds=POLL)

    # Then only the look that finds it Ready opens the gate: a Ready between looks is not taken
    assert outcomes == [(True, None), (True, None), (True, None), (False, "node-ready")]
