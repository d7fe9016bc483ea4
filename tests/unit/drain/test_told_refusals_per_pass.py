"""How many refusals one pass of the drain tells of: each told refusal is an Event on the pod and one on its node,
a request each, and a pass over many refused pods against a slow API server would spend its step's time on them.
A pass tells of a few; the others are told at the next passes, each pod once per drain, and every refusal is
counted (the alarm) at every pass."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.drain.evict import TOLD_PER_PASS
from tests.support.fakes import T0, FakeMetrics
from tests.unit.drain.test_drain_steps import (
    NODE,
    FakeCluster,
    FakeEvents,
    draining,
    evict,
    node,
    pod,
    polled,
)

PODS = [f"web-{i}" for i in range(TOLD_PER_PASS + 2)]
WHY = 'admission webhook "guard.example.com" denied the request: pinned'


def told(events: FakeEvents, reason: str) -> list[str]:
    """The pods told of, in order (their node's events aside)."""
    return [subject for subject, said, _ in events.written if said == reason and subject != NODE]


def test_a_pass_tells_of_a_few_refused_evictions_and_the_next_pass_of_the_others() -> None:
    # Given a node whose every pod the API server will not evict
    cluster = FakeCluster(
        nodes={NODE: node()}, pods=[pod(name) for name in PODS], refused=dict.fromkeys(PODS, WHY)
    )
    metrics, events = FakeMetrics(), FakeEvents()
    step = evict(cluster, metrics=metrics, events=events)

    # When the drain asks them to leave twice
    first = step(draining(), T0)
    after_first = told(events, "EvictionRefused")
    step(draining().model_copy(update=dict(first.changes)), T0 + timedelta(seconds=1))

    # Then the first pass tells of a few, the second of the others, each once; every refusal is counted each time
    assert after_first == [f"apps/{name}" for name in PODS[:TOLD_PER_PASS]]
    assert told(events, "EvictionRefused") == [f"apps/{name}" for name in PODS]
    assert len(events.written) == 2 * len(PODS)
    assert metrics.counts["EvictionErrors"] == 2 * len(PODS)


def test_a_pass_of_the_force_policy_tells_of_a_few_refused_deletes() -> None:
    # Given a drain past its timeout (force policy), whose every pod the API server will not delete
    cluster = FakeCluster(
        nodes={NODE: node()}, pods=[pod(name) for name in PODS], undeletable=dict.fromkeys(PODS, WHY)
    )
    metrics, events = FakeMetrics(), FakeEvents()
    step = evict(cluster, metrics=metrics, events=events)
    deadline = T0 + timedelta(seconds=600)

    # When the force policy deletes them twice
    first = step(polled(), deadline)
    after_first = told(events, "DeletionRefused")
    step(polled().model_copy(update=dict(first.changes)), deadline + timedelta(seconds=5))

    # Then the first pass tells of a few, the second of the others
    assert after_first == [f"apps/{name}" for name in PODS[:TOLD_PER_PASS]]
    assert told(events, "DeletionRefused") == [f"apps/{name}" for name in PODS]
