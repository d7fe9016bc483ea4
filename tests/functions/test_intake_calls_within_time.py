"""The intake function's AWS calls within its invocation's time, on moto with Auto Scaling taking each call and never
answering. Intake starts an instance only with 10 s of its 30 left (domain/intake_budget.py), but a call begun had
no end of its own: five read timeouts (100 s) and the backoffs between them, and Lambda ended the invocation
mid-call, its log and metrics with it, and the batch's records already taken in came back beside the one that
hung. Now the call ends within the invocation's time: the event fails as a transient error, and its retry takes
it in."""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import ModuleType

import pytest

from nodecycle.domain.errors import TransientError
from nodecycle.wiring.common import MIN_RUN_SECONDS, STEP_RESERVE_SECONDS
from nodecycle_sandbox.aws.install import install
from tests.functions.intake.conftest import GROUP, make_group
from tests.functions.test_aws_calls_within_time import LATE_SECONDS, HungEndpoint
from tests.support.events import happening_now, load_event
from tests.support.functions import LambdaContext, load_function
from tests.support.stack import Stack

# The invocation's time left when the event comes: the least that sets a deadline, and a second more
REMAINING = MIN_RUN_SECONDS + STEP_RESERVE_SECONDS + 1.0


@pytest.fixture
def intake_fn(stack: Stack) -> ModuleType:
    install()
    make_group(GROUP)
    return load_function("intake")


@pytest.fixture
def hung_autoscaling(intake_fn: ModuleType, monkeypatch: pytest.MonkeyPatch) -> Iterator[HungEndpoint]:
    endpoint = HungEndpoint()  # (after the group is made: the function's clients, made later, go there)
    monkeypatch.setenv("AWS_ENDPOINT_URL_AUTO_SCALING", endpoint.url)
    yield endpoint
    endpoint.close()


def test_an_event_whose_auto_scaling_call_hangs_fails_within_the_invocations_time(
    intake_fn: ModuleType, hung_autoscaling: HungEndpoint
) -> None:
    # Given a terminate lifecycle action of a managed group, and Auto Scaling that never answers
    event = happening_now(load_event("eventbridge-terminate.json"))

    # When intake receives it with REMAINING seconds of its time left
    started = time.monotonic()
    with pytest.raises(TransientError):
        intake_fn.handler(event, LambdaContext(remaining_millis=int(REMAINING * 1000)))

    # Then it failed as a transient error (EventBridge's retry takes it in) before its time was out, having
    # asked Auto Scaling what that time allowed
    assert time.monotonic() - started < REMAINING + LATE_SECONDS
    assert hung_autoscaling.requests >= 1
