"""A drain near its action's global timeout, driven through the step engine: a drain that lost its budget
slot (paused), and a node forced into the budget with a load balancer delay to wait.

Invariant 2: a terminating node's action is not completed before its drain finished or its drain timeout
policy applied. Cordon caps a drain's deadline at ``global_deadline - tail`` so that the timeout policy
(force) and the load balancer delay still fit before the engine's guard completes the action: a pause must
not move the deadline past that point, a paused drain near the global timeout must take its slot back the
way a waiter does (forced), and the tail must count the load balancer delay.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from nodecycle.domain.completion import CompleteAction, SettleResults
from nodecycle.domain.drain.common import _tail
from nodecycle.domain.engine import EngineTiming, Outcome, StepEngine
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.ports.cluster import PodInfo
from nodecycle.domain.ports.lifecycle import WorkMessage
from tests.support.fakes import FakeAutoscaling, FakeClock, FakeMetrics, InMemoryRecords, RecordingQueues
from tests.unit.drain.builders import pod
from tests.unit.drain.test_drain_steps import (
    NODE,
    FakeCluster,
    FakeEvents,
    FakeSlots,
    evict,
    node,
    policy,
    settings,
    terminating,
)


@dataclass
class KubeletCluster(FakeCluster):
    """A node whose kubelet works: a pod being deleted is gone once its grace period is over."""

    def pods_on(self, node: str) -> list[PodInfo]:
        self.pods = [p for p in self.pods if p.deletion_at is None or p.deletion_at > self.now]
        return super().pods_on(node)


@dataclass
class Run:
    done: LifecycleRecord
    worked_at: list[datetime] = field(default_factory=list)  # when a pass evicted or deleted a pod


def run(record: LifecycleRecord, start: datetime, cluster: FakeCluster, slots: FakeSlots, **env: str) -> Run:
    """Drive the engine (EVICT, then COMPLETE) from ``start`` until the action is completed. The budget's time
    is the engine's: its scenario is as of ``start``, and its entries expire as the run goes on."""
    config = settings(**env)
    clock = slots.clock
    assert clock.now() == start, "the budget's scenario is as of the run's start"
    records, metrics = InMemoryRecords(), FakeMetrics()
    autoscaling = FakeAutoscaling(clock=clock)
    autoscaling.kept_alive(record.token, start)
    records.create(record.renewed(start).model_copy(update={"due_at": start}))
    engine = StepEngine(
        worker=Worker.DRAIN,
        steps={
            Step.EVICT: evict(cluster, slots, metrics, FakeEvents(), None, **env),
            Step.COMPLETE: CompleteAction(autoscaling, metrics),
            Step.CLEANUP: lambda r, n: Outcome.next(),
        },
        records=records,
        queues=RecordingQueues(),
        autoscaling=autoscaling,
        clock=clock,
        metrics=metrics,
        timing=EngineTiming(
            resume_grace=timedelta(seconds=config.resume_grace_seconds),
            heartbeat_margin=timedelta(seconds=config.heartbeat_margin_seconds),
            redelivery=timedelta(seconds=config.redelivery_seconds),
            settle_before=timedelta(seconds=config.settle_before_seconds),
        ),
        failure_result=SettleResults(),
    )
    worked_at: list[datetime] = []
    for _ in range(3000):
        current = records.get(record.id)
        assert current is not None
        if current.completed_at is not None:
            return Run(current, worked_at)
        clock.current = max(clock.current, current.due_at)
        cluster.now = clock.current
        before = len(cluster.deletions) + len(cluster.evictions)
        engine.handle(WorkMessage(record_id=current.id, seq=current.seq, step=current.step))
        if len(cluster.deletions) + len(cluster.evictions) > before:
            worked_at.append(clock.current)
    raise AssertionError("the lifecycle never completed")


def paused_drain(back_after: int) -> tuple[LifecycleRecord, datetime]:
    """A drain cordoned with room before its global timeout (its 600 s deadline 100 s before the tail), that
    lost its budget slot 50 s in; and when the slot is back, ``back_after`` s after the cordon."""
    deadline_cap = terminating(Step.EVICT).global_deadline - _tail(policy())
    cordoned = deadline_cap - timedelta(seconds=600 + 100)
    record = terminating(
        Step.EVICT,
        node=NODE,
        drain_started_at=cordoned,
        drain_deadline=cordoned + timedelta(seconds=600),
        drain_paused_at=cordoned + timedelta(seconds=50),
        extra={"polls": 1},
    )
    return record, cordoned + timedelta(seconds=back_after)


def test_a_pause_moves_the_drains_deadline_on_but_never_past_where_the_timeout_policy_must_act() -> None:
    # Given that drain, blocked by a PodDisruptionBudget, getting its slot back 400 s after it lost it
    record, back = paused_drain(back_after=450)
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("db-0")], blocked={"db-0"})

    # When it resumes
    resumed = evict(cluster, FakeSlots(holders={NODE}))(record, back)

    # Then its deadline moves on by the pause, up to the point Cordon caps it at, not 300 s past it
    assert resumed.changes["drain_deadline"] == record.global_deadline - _tail(policy())


def test_a_drain_paused_long_still_applies_its_timeout_policy_before_its_action_is_completed() -> None:
    # The same drain driven by the engine: the force policy deletes the blocked pod, and the drain completes
    # the action, not the guard with the pod still on the node
    record, back = paused_drain(back_after=450)
    cluster = KubeletCluster(nodes={NODE: node()}, pods=[pod("db-0")], blocked={"db-0"})

    done = run(record, back, cluster, FakeSlots(holders={NODE}, clock=FakeClock(back))).done

    assert [name for name, _ in cluster.deletions] == ["db-0"]
    assert done.outcome == "drain-timeout-forced"


def test_a_paused_drain_near_its_global_timeout_takes_its_slot_back_without_room() -> None:
    # Given a drain that lost its slot 1,200 s before its action's global timeout (a whole drain still fits)
    # while the budget stays full: only a forced request gets in
    paused = terminating(Step.EVICT).global_deadline - timedelta(seconds=1200)
    record = terminating(
        Step.EVICT,
        node=NODE,
        drain_started_at=paused - timedelta(seconds=100),
        drain_deadline=paused + timedelta(seconds=500),
        drain_paused_at=paused,
        extra={"polls": 1},
    )
    cluster = KubeletCluster(nodes={NODE: node()}, pods=[pod("web-1"), pod("web-2")])
    slots = FakeSlots(holders={NODE}, lost=True, clock=FakeClock(paused))

    ran = run(record, paused, cluster, slots)

    # Then, like a waiter (AcquireSlot), it forces its slot once a whole drain no longer fits otherwise, and
    # drains: a drain that respects PodDisruptionBudgets beats none
    forced = [r for r in slots.requests if r.force]
    assert forced
    assert all(r.in_progress for r in forced)
    assert ran.worked_at
    assert ran.done.outcome == "drained"


def test_a_node_forced_into_the_budget_near_its_global_timeout_gets_its_whole_load_balancer_delay() -> None:
    # Given a stack with a 300 s load balancer deregistration delay, and a terminating node forced a slot at
    # global_deadline - full drain (AcquireSlot's point), its pod blocked by a PodDisruptionBudget until the
    # drain timeout, then force-deleted
    env = {"lb_deregistration_delay_seconds": "300"}
    lb_policy = policy(**env)
    base = terminating(Step.EVICT)
    tail = _tail(lb_policy)
    started = base.global_deadline - (lb_policy.timeout + tail)
    record = terminating(
        Step.EVICT,
        node=NODE,
        drain_started_at=started,
        drain_deadline=min(started + lb_policy.timeout, base.global_deadline - tail),  # as Cordon sets it
    )
    cluster = KubeletCluster(nodes={NODE: node()}, pods=[pod("db-0")], blocked={"db-0"})

    done = run(record, started, cluster, FakeSlots(holders={NODE}, clock=FakeClock(started)), **env).done

    # Then the action is completed only once the node was out of the load balancers' way for the whole delay
    assert done.completed_at is not None
    drained_at = datetime.fromisoformat(done.extra["drained_at"])
    assert (done.completed_at - drained_at).total_seconds() >= 300
    assert done.outcome == "drain-timeout-forced"


def capped_drain() -> tuple[LifecycleRecord, datetime]:
    """A drain whose deadline is capped where its timeout policy must still act before the global timeout (one that
    waited long for its slot: that wait is not drain time), at its polls; and when it started."""
    cap = terminating(Step.EVICT).global_deadline - _tail(policy())
    start = cap - timedelta(seconds=600)
    record = terminating(
        Step.EVICT, node=NODE, drain_started_at=start, drain_deadline=cap, extra={"polls": 1}
    )
    return record, start


def test_a_capped_drain_whose_forced_deletes_are_refused_ends_by_its_own_policy_not_the_guard() -> None:
    # Given a capped drain whose pod a PodDisruptionBudget without room protects, and whose delete an admission
    # webhook denies: the force policy asks it again until the force grace and its minute are over
    record, start = capped_drain()
    cluster = KubeletCluster(
        nodes={NODE: node()},
        pods=[pod("db-0")],
        blocked={"db-0"},
        undeletable={"db-0": "admission webhook denied the request"},
        now=start,
    )

    # When the engine drives it to its completion
    done = run(record, start, cluster, FakeSlots(holders={NODE}, clock=FakeClock(start))).done

    # Then the drain ends as its policy says, within the tail its cap left it, not by the engine's guard (which
    # pages: GlobalTimeoutsNear) the moment the force's wait was over
    assert done.outcome == "drain-timeout-forced-incomplete"


def test_a_capped_drain_whose_pods_cannot_be_listed_ends_by_its_own_policy_not_the_guard() -> None:
    # Given a capped drain whose pods cannot be listed (an overloaded etcd: 504s) from before its timeout on
    record, start = capped_drain()
    cluster = KubeletCluster(nodes={NODE: node()}, pods=[pod("db-0")], pods_failing="HTTP 504", now=start)

    # When the engine drives it to its completion
    done = run(record, start, cluster, FakeSlots(holders={NODE}, clock=FakeClock(start))).done

    # Then the force waits its grace and minute for a list, and the drain ends so, not by the guard
    assert done.outcome == "drain-timeout-unlisted"
