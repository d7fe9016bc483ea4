"""A late delivery of a drain's first ask that finds its lifecycle over (its slot given back before the budget's
ConfigMap was created again: see test_late_asks_after_recreation.py) gives back the slot it was granted. That
give-back is a write of the budget's ConfigMap, which the API server may fail (5xx, throttling, a conflict storm)
or refuse (403): raised into the engine, it was taken for a failure of the step (StepRetries, a refused step told
as an error and counted towards the dead-letter queue) whose retry was never run, the delivery's commit losing to
the record that went on. The step's own: a wait, no sooner than a Retry-After; the slot it could not give back is
its lifecycle's over, which the sweeper frees (or its TTL ends)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import Step
from nodecycle.domain.ports.cluster import Refused
from tests.support.fakes import T0, FakeMetrics, InMemoryRecords
from tests.unit.drain.test_drain_steps import (
    NODE,
    FakeCluster,
    FakeSlots,
    acquire,
    node,
    policy,
    terminating,
)


class GiveBackFailing(FakeSlots):
    """A budget whose releases the API server fails with ``error`` (its asks answered)."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error
        self.store.created_at = T0 + timedelta(minutes=1)  # created again after the lifecycle began

    def release(
        self, node: str, record_id: str, token: str | None = None, *, gone: str | None = None
    ) -> list[str]:
        raise self.error


@pytest.mark.parametrize(
    "error",
    [
        TransientError("500 etcdserver: request timed out", retry_after=None),
        TransientError("429 Too Many Requests", retry_after=40),
        Refused("403 configmaps nodecycle-budget is forbidden"),
    ],
    ids=["failing", "throttled", "refused"],
)
def test_a_late_give_back_that_fails_is_the_steps_wait_not_raised(error: Exception) -> None:
    # Given a drain whose record is done, the ConfigMap created again since it began, and its writes failing
    records = InMemoryRecords()
    records.create(terminating(Step.DONE, seq=9))
    slots = GiveBackFailing(error)
    cluster = FakeCluster(nodes={NODE: node()})
    metrics = FakeMetrics()
    step = acquire(cluster, slots, metrics, records=records)

    # When a late delivery of its first ask runs
    outcome = step(terminating(Step.ACQUIRE_SLOT), T0 + timedelta(minutes=2))

    # Then the failed give-back is not raised into the engine: the step waits (its commit loses), no sooner than
    # a Retry-After; the slot stays with its lifecycle over (the sweeper's to free), no alarm
    assert (outcome.again, outcome.then) == (True, None)
    retry_after = getattr(error, "retry_after", None) or 0
    assert outcome.delay >= max(policy().budget_retry_seconds, retry_after)
    assert slots.holders == {NODE}
    assert metrics.counts.get("EvictionErrors", 0) == 0
