"""Intake of a disruption under EC2 that lags (sandbox/nodecycle_sandbox/aws/ec2_consistency.py): for a while after
a launch, intake's ``DescribeInstances`` does not list the new instance (``InvalidInstanceID.NotFound``). A Spot
interruption or a rebalance recommendation of an instance launched moments ago is real all the same: intake
looks again for a bounded time before it refuses the instance as one EC2 does not know, and a forged disruption
of an id that never existed costs no more than that wait (one wait per invocation, not one per record)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from types import ModuleType

import pytest

from nodecycle.adapters.clock import SystemClock
from nodecycle.domain.intake import LISTING_LAG
from nodecycle.wiring import intake as intake_wiring
from nodecycle_sandbox.aws.ec2_consistency import LAG
from tests.functions.eip.conftest import Clock, ec2_signing_as
from tests.functions.intake.test_disruption_intake import ec2_event, launch, records, work
from tests.support.emf import metric
from tests.support.events import sqs_event
from tests.support.functions import LambdaContext
from tests.support.stack import Stack

FUNCTION_KEY = "AKIAFUNCTIONINTAKE00"  # the intake function's: its EC2 reads lag
LAG_SECONDS = 1.5  # EC2's: usually under a second, seconds under load


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """The sandbox's clock, which intake's waits move on instead of sleeping: the EC2 lag's, and intake's own
    (SystemClock: the time, plus the waits) with it, so that a wait ends when intake reckons it should, on
    both. (The time goes on too: an event the test stamps with it is never ahead of intake's clock.)"""
    sandbox = Clock()
    at_start = sandbox.now
    now = SystemClock.now

    def pause(seconds: float) -> None:
        sandbox.now += seconds

    monkeypatch.setattr(intake_wiring, "pause", pause)
    monkeypatch.setattr(
        SystemClock, "now", lambda self: now(self) + timedelta(seconds=sandbox.now - at_start)
    )
    return sandbox


@pytest.fixture
def lagging(monkeypatch: pytest.MonkeyPatch, clock: Clock) -> Iterator[None]:
    """Intake's EC2 client signs with FUNCTION_KEY, whose reads lag the launches made from now on (on the
    sandbox's clock: intake's wait moves it on, nothing sleeps)."""
    ec2_signing_as(FUNCTION_KEY, monkeypatch)
    LAG.arm(LAG_SECONDS, [FUNCTION_KEY], clock=clock)
    try:
        yield
    finally:
        LAG.disarm()


@pytest.mark.parametrize(
    ("sample", "cause"),
    [
        ("eventbridge-spot-interruption.json", "spot-interruption"),
        ("eventbridge-rebalance-recommendation.json", "rebalance"),
    ],
)
def test_a_disruption_of_an_instance_launched_moments_ago_is_drained_for(
    lagging: None,
    intake_fn: ModuleType,
    stack: Stack,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    sample: str,
    cause: str,
) -> None:
    monkeypatch.setenv("NODECYCLE_REBALANCE_POLICY", "drain")  # (a rebalance recommendation drained for)
    # Given an instance of a managed group launched just now, which intake's EC2 reads do not list yet
    instance = launch()

    # When AWS tells (by EventBridge) that it will be interrupted
    intake_fn.handler(ec2_event(sample, instance), LambdaContext())

    # Then its node is drained: a record of its own, and its first step sent (not dropped as unknown to EC2)
    out = capsys.readouterr().out
    assert metric(out, "LifecycleEventsRejected", reason="unknown-instance") == 0
    (record,) = records()
    assert record["id"] == f"{instance}/{cause}"
    assert [message["step"] for message in work(stack.drain_queue)] == ["acquire-slot"]
    assert any(met.startswith("describe_instances ") for met in LAG.lagged)  # (the lag was met)


def test_forged_disruptions_of_ids_that_never_existed_cost_one_bounded_wait(
    lagging: None, clock: Clock, intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a batch of the intake queue with three forged Spot interruptions, each of an id EC2 never had
    forged = [f"i-0{n}ffffffffffffffff"[:19] for n in range(3)]
    batch = sqs_event(*[ec2_event("eventbridge-spot-interruption.json", instance) for instance in forged])

    # When intake receives it
    started = clock.now
    response = intake_fn.handler(batch, LambdaContext())
    took = clock.now - started  # (the time intake waited, on the clock its waits move on)

    # Then each is refused as unknown to EC2, none failed back to the queue (no retry of what will never be
    # listed), and the invocation waited for EC2's listing once, not once per record
    assert response == {"batchItemFailures": []}
    assert records() == []
    assert metric(capsys.readouterr().out, "LifecycleEventsRejected", reason="unknown-instance") == 3
    assert took < LISTING_LAG.total_seconds() + 2
