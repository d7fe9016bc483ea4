"""A launch waiting at the readiness gate is kept alive by heartbeats until the gate's timeout settles it.

A launch hook's heartbeat timeout may be as short as 30 s (PutLifecycleHook: HeartbeatTimeout from 30 to 7200 s)
while the gate waits minutes for a node (ReadinessTimeoutSeconds, 600 s by default). Each of the gate's looks goes
through the engine's keep-alive as a drain's polls do: a look that would come past the last safe moment is
brought forward, and the run heartbeats. So a node that never joins is given up by the gate, with
ReadinessFailureResult, at its timeout, not by Auto Scaling's heartbeat timeout with the hook's default result;
with every message delivered late by less than the heartbeat margin, and each look taking its time.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from nodecycle.domain.completion import CompleteAction
from nodecycle.domain.engine import EngineTiming, Outcome, StepEngine
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import LifecycleRecord, Step, global_deadline
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.lifecycle import WorkMessage
from tests.support.fakes import T0, FakeClock, FakeMetrics, InMemoryRecords, LaunchingGroup, RecordingQueues
from tests.support.readiness_gates import Dns, gate_on
from tests.unit.drain.test_drain_steps import FakeCluster, launching, readiness

HOOK = 30  # the launch hook's heartbeat timeout: AWS's shortest
MARGIN = 5  # HeartbeatMarginSeconds: the template's least
REDELIVERY = 150  # the work queue's visibility timeout (the settings' default)
TIMEOUT = 120  # ReadinessTimeoutSeconds


@pytest.mark.parametrize(("poll", "late", "look"), [(5, 4.0, 0.5), (30, 4.0, 0.5), (300, 4.0, 0.5)])
def test_a_node_that_never_joins_is_given_up_by_the_gate_not_by_the_hooks_heartbeat_timeout(
    poll: int, late: float, look: float
) -> None:
    # Given a launch under a 30 s hook whose node never joins, the gate polling every `poll` s, every message
    # delivered `late` s after its due time and every look taking `look` s
    clock = FakeClock(T0)
    autoscaling = LaunchingGroup(clock=clock, action_timeout=HOOK)
    records, metrics = InMemoryRecords(), FakeMetrics()
    record = launching(
        heartbeat_timeout=HOOK,
        heartbeat_deadline=T0 + timedelta(seconds=HOOK),
        global_deadline=global_deadline(T0, HOOK),
    )
    records.create(record)
    policy = readiness(
        readiness_timeout_seconds=str(TIMEOUT), drain_poll_seconds=str(poll), budget_holder_ttl_seconds="1200"
    )
    gate = gate_on(FakeCluster(), Dns(), policy, metrics=metrics, autoscaling=autoscaling)

    def looking(record: LifecycleRecord, now: datetime) -> Outcome:
        outcome = gate(record, now)
        clock.current += timedelta(seconds=look)
        return outcome

    engine = StepEngine(
        worker=Worker.DRAIN,
        steps={Step.READY_GATE: looking, Step.COMPLETE: CompleteAction(autoscaling, metrics)},
        records=records,
        queues=RecordingQueues(),
        autoscaling=autoscaling,
        clock=clock,
        metrics=metrics,
        timing=EngineTiming(
            resume_grace=timedelta(seconds=60),
            heartbeat_margin=timedelta(seconds=MARGIN),
            redelivery=timedelta(seconds=REDELIVERY),
            settle_before=timedelta(seconds=MARGIN + REDELIVERY),
        ),
        failure_result=lambda record: ActionResult.ABANDON,
    )

    # When the engine runs each of its messages
    current = records.get(record.id)
    assert current is not None
    while current.step is Step.READY_GATE:
        clock.current = max(clock.current, current.due_at + timedelta(seconds=late))
        assert clock.current < autoscaling.expires_at("token"), "the action timed out before this look"
        engine.handle(WorkMessage(record_id=current.id, seq=current.seq, step=current.step))
        current = records.get(record.id)
        assert current is not None

    # Then the gate gave up at its timeout (counted from its first look, itself late; a delivery's lateness and a
    # look past it at most) and completed the action, still active, with ReadinessFailureResult
    assert (current.outcome, current.result) == ("node-never-joined", ActionResult.ABANDON)
    assert [result for _, result in autoscaling.completed] == [ActionResult.ABANDON]
    assert metrics.counts["ReadinessTimeouts"] == 1
    assert current.completed_at is not None
    assert current.completed_at <= T0 + timedelta(seconds=late + TIMEOUT + late + look + 1)
