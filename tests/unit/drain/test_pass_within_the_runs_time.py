"""A drain's pass within its invocation's time: its calls stop once too little is left of it (the function's time
less what the engine needs after the step), and the pass ends as a poll, re-queued, with what it did. Killed
mid-pass, the invocation would commit nothing, and its message would come back only after the queue's visibility
timeout. The pods not asked are asked first at the next poll; the force policy's deletes alike."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from nodecycle.domain.drain.evict import PASS_END_SECONDS, Evict
from nodecycle.wiring.drain import STEP_RESERVE_SECONDS, InvocationTime
from tests.support.fakes import T0, FakeMetrics
from tests.unit.drain.builders import no_end, pod
from tests.unit.drain.test_drain_steps import (
    INSTANCE,
    NODE,
    FakeCluster,
    FakeEvents,
    FakeSlots,
    NoDns,
    draining,
    node,
    policy,
    polled,
    wakes_to_nowhere,
)

CALL_SECONDS = 2.0  # what each of the API server's answers to the pass takes


def evict(cluster: FakeCluster, time_left: Callable[[], float | None]) -> Evict:
    """The EVICT step in a run with ``time_left``."""
    return Evict(
        cluster=cluster,
        slots=FakeSlots(holders={NODE}),
        dispatcher=wakes_to_nowhere(),
        instances=NoDns(known={INSTANCE: "running"}),
        policy=policy(),
        metrics=FakeMetrics(),
        events=FakeEvents(),
        time_left=time_left,
    )


def test_a_pass_stops_asking_when_its_run_has_too_little_left_and_the_next_poll_asks_the_rest() -> None:
    # Given six pods, and a run with 5 s left for the pass's calls, each eviction taking two
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod(f"web-{i}") for i in range(6)])

    def time_left() -> float:
        return 5.0 - CALL_SECONDS * len(cluster.evictions)

    # When the drain polls
    outcome = evict(cluster, time_left)(draining(), T0)

    # Then it asked pods while a second was left (5, 3, 1 s), and polls again with what it did
    assert [name for name, _ in cluster.evictions] == ["web-0", "web-1", "web-2"]
    assert time_left() < PASS_END_SECONDS
    assert outcome.again
    assert outcome.changes["pods_evicted"] == 3

    # And its next poll, in an invocation of its own, asks the other three
    record = draining().model_copy(update=dict(outcome.changes))
    evict(cluster, no_end)(record, T0 + timedelta(seconds=outcome.delay))
    assert [name for name, _ in cluster.evictions][3:] == ["web-3", "web-4", "web-5"]


def test_the_force_policys_deletes_stop_when_the_run_has_too_little_left() -> None:
    # Given a drain past its timeout (force policy), four pods left, and a run with 3 s left for its calls
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod(f"web-{i}") for i in range(4)])
    deadline = T0 + timedelta(seconds=600)

    def time_left() -> float:
        return 3.0 - CALL_SECONDS * len(cluster.deletions)

    # When the drain polls
    outcome = evict(cluster, time_left)(polled(), deadline)

    # Then it deleted pods while a second was left (3, 1 s), and polls again, forcing
    assert [name for name, _ in cluster.deletions] == ["web-0", "web-1"]
    assert outcome.again
    assert outcome.changes["forced_at"] == deadline


def test_an_invocation_reading_no_time_left_at_its_start_keeps_the_calls_own_timeouts() -> None:
    # Given the drain function's invocations, as the runtime tells their time left (on the container's clock)
    run = InvocationTime()

    # When one starts with the function's timeout ahead, Then its steps' calls have that, less the reserve
    with run.running(60.0):
        left = run.left()
        assert left is not None
        assert 60.0 - STEP_RESERVE_SECONDS - 1 < left <= 60.0 - STEP_RESERVE_SECONDS
    # When one reads nothing left at its start (a container clock set ahead: a fresh invocation has a minute),
    # Then no deadline is set: every call would be refused for want of time, and the drain could not go on
    with run.running(0.0):
        assert run.left() is None
    assert run.left() is None  # (outside an invocation: the sweeper's)
