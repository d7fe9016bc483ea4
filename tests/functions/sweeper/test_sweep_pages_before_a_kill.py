"""The sweeper's pages are out before its next call: a sweep killed after it (its Lambda timeout, out of memory:
no ``finally``, no flush of what powertools buffered) has told them.

A settlement counts GlobalTimeoutsNear once per action, by the sweep whose claim lands (its record says so, and
a later settlement does not count it again); a heartbeat that finds an action gone counts LifecycleActionsExpired
once, and commits the lifecycle past it. Powertools buffers a metric without dimensions until the invocation
ends: a sweep killed after such a commit (its completion call hung until the timeout, say) had counted the page
in memory only, and the record said it was counted: the GlobalTimeoutNearAlarm or ExpiredActionsAlarm never saw it.
Here each page must be in the function's output (CloudWatch's EMF lines) when the sweep makes its next AWS call,
where the runtime may end it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import boto3
import pytest

from nodecycle.domain.model import Step
from tests.functions.intake.conftest import HEARTBEAT_TIMEOUT
from tests.functions.sweeper.test_late_schedule import fired
from tests.functions.sweeper.test_sweeper_function import invocation, kept_to_the_end, record, store
from tests.support.emf import metric
from tests.support.stack import Stack


@dataclass
class Call:
    """An AWS call the function made, and what it had written out (stdout) when it made it: what a runtime that
    ended the invocation at that call would have kept."""

    name: str  # Service.Operation
    request: str
    output: str


@contextmanager
def calls_made(capsys: pytest.CaptureFixture[str]) -> Iterator[list[Call]]:
    calls: list[Call] = []
    written: list[str] = []

    def snapshot(model: Any, params: Any, **_: Any) -> None:
        written.append(capsys.readouterr().out)
        calls.append(Call(f"{model.service_model.service_id}.{model.name}", str(params), "".join(written)))

    events = boto3._get_default_session().events
    events.register("before-call.*.*", snapshot, unique_id="tests.CallsMade")
    try:
        yield calls
    finally:
        events.unregister("before-call.*.*", unique_id="tests.CallsMade")


def after(calls: list[Call], name: str, marker: str) -> list[Call]:
    """The calls after the first ``name`` call whose request carries ``marker``."""
    for index, call in enumerate(calls):
        if call.name == name and marker in call.request:
            return calls[index + 1 :]
    raise AssertionError(f"no {name} with {marker!r} among {[c.name for c in calls]}")


def test_a_settlement_has_counted_its_action_near_its_global_timeout_when_it_calls_auto_scaling(
    sweeper: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a lifecycle stalled near its action's global timeout
    started = datetime.now(UTC) - timedelta(seconds=HEARTBEAT_TIMEOUT * 100 - 60)
    stuck = kept_to_the_end(
        record("i-0aaaaaaaaaaaaaaa3", Step.RELEASE_EIP, started + timedelta(minutes=1), started)
    )
    assert store(stack).create(stuck)
    capsys.readouterr()

    # When the sweep settles it: its claim written (saying the action was counted near its global timeout), then
    # Auto Scaling asked where the instance is and to complete the action
    with calls_made(capsys) as calls:
        report = sweeper.handler(fired(timedelta()), invocation())

    # Then the page was out at every call after the claim (before: only once the invocation ended, and a sweep
    # killed at any of them had it in memory alone, while its claim said it was counted)
    assert report["LifecyclesSettled"] == 1
    later = after(calls, "DynamoDB.PutItem", "near_global_timeout")
    assert later
    assert [(c.name, metric(c.output, "GlobalTimeoutsNear")) for c in later] == [(c.name, 1) for c in later]
    # (and counted once in all)
    assert metric(calls[-1].output + capsys.readouterr().out, "GlobalTimeoutsNear") == 1


def test_an_expiry_is_counted_when_the_sweep_sends_its_lifecycle_on(
    sweeper: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a stalled lifecycle whose heartbeat deadline passed (moto has no action for it: it expired)
    now = datetime.now(UTC)
    started = now - timedelta(hours=1)
    stalled = record("i-0aaaaaaaaaaaaaaa8", Step.EVICT, now - timedelta(minutes=10), started)
    stalled = stalled.model_copy(update={"heartbeat_deadline": now - timedelta(seconds=30)})
    assert store(stack).create(stalled)
    capsys.readouterr()

    # When the sweep finds it gone: the lifecycle committed past its completion, then sent on
    with calls_made(capsys) as calls:
        report = sweeper.handler(fired(timedelta()), invocation())

    # Then the expiry's page was out at every call after that commit
    assert report["LifecyclesExpired"] == 1
    swept = store(stack).get(stalled.id)
    assert swept is not None
    assert swept.outcome == "action-expired"
    later = after(calls, "DynamoDB.PutItem", "action-expired")
    assert later
    assert [(c.name, metric(c.output, "LifecycleActionsExpired")) for c in later] == [
        (c.name, 1) for c in later
    ]
