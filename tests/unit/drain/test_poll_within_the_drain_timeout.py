"""A drain's last poll before its timeout waits no longer than its timeout: the timeout policy acts at the drain
timeout, whatever the poll interval (``DrainPollSeconds``: up to 300 s).

Invariant 10: no drain holds its slot past its timeout + force grace + a margin (the campaign's ``slot-held``: 20 s).
A poll's wait was its poll interval (1 s, 2 s, 4 s... up to ``DrainPollSeconds``) from wherever the poll before it
fell, so a drain polling every 300 s whose last poll came 10 s before its timeout looked again 290 s past it, and
only then forced its pods (or, under ``continue``, completed): its slot held that much longer than the invariant
allows, and, with its deadline capped near the action's global timeout (``_deadline_cap``, whose tail counts no poll),
the engine's guard completed the action before the timeout policy applied (invariant 2).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from nodecycle.domain.completion import SettleResults
from nodecycle.domain.engine import EngineTiming, Outcome, StepEngine
from nodecycle.domain.errors import TransientError
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.ports.lifecycle import WorkMessage
from tests.support.fakes import (
    T0,
    FakeAutoscaling,
    FakeClock,
    FakeMetrics,
    InMemoryRecords,
    RecordingQueues,
)
from tests.unit.drain.test_drain_near_the_global_timeout import KubeletCluster, run
from tests.unit.drain.test_drain_steps import (
    NODE,
    FakeCluster,
    FakeSlots,
    draining,
    evict,
    node,
    pod,
    settings,
)

DEADLINE = T0 + timedelta(seconds=600)  # (``draining``'s)
POLL, TTL = "300", "1200"  # a drain polling every 300 s (the holder TTL must cover 3 polls)


def test_the_last_poll_before_the_timeout_comes_back_at_the_timeout_not_a_poll_interval_later() -> None:
    # Given a drain polling every 300 s whose pod a PodDisruptionBudget without room protects, 10 s before its
    # timeout, its polls backed off to the whole interval
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("db-0")], blocked={"db-0"})
    record = draining(extra={"polls": 9})

    # When it polls
    outcome = evict(cluster, drain_poll_seconds=POLL, budget_holder_ttl_seconds=TTL)(
        record, DEADLINE - timedelta(seconds=10)
    )

    # Then it looks again at its timeout, not 256 s past it
    assert outcome.again
    assert outcome.delay <= 10, outcome.delay


def test_a_poll_with_its_pods_list_refused_comes_back_at_the_timeout() -> None:
    # Given the same drain, the API server refusing it the list of its pods (RBAC edited for a while)
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("db-0")], pods_refused="pods is forbidden")
    record = draining(extra={"polls": 9})

    # When it polls 10 s before its timeout
    outcome = evict(cluster, drain_poll_seconds=POLL, budget_holder_ttl_seconds=TTL)(
        record, DEADLINE - timedelta(seconds=10)
    )

    # Then it asks again at its timeout, where the drain is settled, not a poll interval later
    assert outcome.again
    assert outcome.delay <= 10, outcome.delay


def test_the_force_policy_acts_at_the_drain_timeout_whatever_the_poll_interval() -> None:
    # Given a drain cordoned at T0 (timeout 600 s, force grace 10 s) polling every 300 s, whose pod a
    # PodDisruptionBudget without room protects, on a node whose kubelet stops deleted pods within their grace
    cluster = KubeletCluster(nodes={NODE: node()}, pods=[pod("db-0")], blocked={"db-0"})
    start = T0 + timedelta(seconds=1)
    cluster.now = start

    # When the engine drives it to its completion
    slots = FakeSlots(holders={NODE}, clock=FakeClock(start))
    ran = run(draining(), start, cluster, slots, drain_poll_seconds=POLL, budget_holder_ttl_seconds=TTL)

    # Then the force deletes the pod at the drain's timeout, and the action is completed within the force grace
    # and a margin of it (invariant 10), not a poll interval later
    assert [name for name, _ in cluster.deletions] == ["db-0"]
    assert ran.done.outcome == "drain-timeout-forced"
    assert ran.worked_at[-1] <= DEADLINE + timedelta(seconds=2), ran.worked_at[-1] - DEADLINE
    completed = ran.done.completed_at
    assert completed is not None
    assert completed <= DEADLINE + timedelta(seconds=10 + 20), completed - DEADLINE


def test_a_drain_whose_pods_cannot_be_listed_past_its_timeout_ends_at_the_force_grace_and_its_slack() -> None:
    # Given the same drain past its timeout, the list of its pods failing (an overloaded etcd: 504s), forced a
    # moment ago on what could be known (nothing: no pod could be named)
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("db-0")], pods_failing="HTTP 504", now=DEADLINE)
    step = evict(cluster, drain_poll_seconds=POLL, budget_holder_ttl_seconds=TTL)
    first = step(draining(extra={"polls": 9}), DEADLINE)
    assert first.again
    forced_at = first.changes["forced_at"]

    # When it looks again as it asked
    record = draining(extra={"polls": 9}, forced_at=forced_at)
    at = DEADLINE + timedelta(seconds=first.delay)
    outcome = step(record, at)

    # Then it is over once the force grace and its slack (10 s + 60 s) are, not a whole poll interval later
    assert outcome.changes["outcome"] == "drain-timeout-unlisted"
    assert at <= forced_at + timedelta(seconds=10 + 60 + 2), at - forced_at


def test_a_drain_step_that_fails_just_before_its_timeout_is_tried_again_at_the_timeout() -> None:
    # Given a drain 2 s before its timeout whose poll fails (a 504 of an overloaded API server), its retries backed
    # off to the drain's cap (5 s)
    config = settings()
    now = DEADLINE - timedelta(seconds=2)
    clock = FakeClock(now)
    records = InMemoryRecords()
    autoscaling = FakeAutoscaling(clock=clock)
    autoscaling.kept_alive("token", now)
    record = draining(attempts=6, verified_at=now).renewed(now).model_copy(update={"due_at": now})
    records.create(record)

    def failing(record: LifecycleRecord, now: datetime) -> Outcome:
        raise TransientError("listing the pods: HTTP 504")

    engine = StepEngine(
        worker=Worker.DRAIN,
        steps={Step.EVICT: failing},
        records=records,
        queues=RecordingQueues(),
        autoscaling=autoscaling,
        clock=clock,
        metrics=FakeMetrics(),
        timing=EngineTiming(
            resume_grace=timedelta(seconds=config.resume_grace_seconds),
            heartbeat_margin=timedelta(seconds=config.heartbeat_margin_seconds),
            redelivery=timedelta(seconds=config.redelivery_seconds),
            settle_before=timedelta(seconds=config.settle_before_seconds),
        ),
        failure_result=SettleResults(),
    )

    # When the engine runs it
    engine.handle(WorkMessage(record_id=record.id, seq=record.seq, step=Step.EVICT))

    # Then it is tried again at the drain's timeout, where its timeout policy acts, not up to 5 s past it
    retried = records.get(record.id)
    assert retried is not None
    assert retried.attempts == 7
    assert retried.due_at <= DEADLINE, retried.due_at - DEADLINE
