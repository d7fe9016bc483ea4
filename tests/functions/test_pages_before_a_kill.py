"""The worker functions' once-per-action pages are out before their next AWS call: an invocation killed after the
write that says the action was counted (its Lambda timeout, out of memory: no ``finally``, no flush of what
powertools buffered) has told them.

The engine's guard counts GlobalTimeoutsNear once its commit of the settlement lands, and a heartbeat that finds
an action gone counts LifecycleActionsExpired with the commit that moves the lifecycle past it: a delivery of the
same message again finds the record moved on and counts nothing. Powertools buffers a metric without dimensions
until the handler returns, so an invocation killed after such a commit (a later record of its batch hung, the
completion call hung until the timeout) had counted the page in memory only: the GlobalTimeoutNearAlarm or
ExpiredActionsAlarm never saw it. Here each page must be in the function's output (CloudWatch's EMF lines), with
the dimensions its alarm matches on, when the function makes its next AWS call, where the runtime may end it.
The ordinary counters stay buffered (one EMF line per count would multiply the log volume)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from types import ModuleType

import pytest

from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle_sandbox.aws.install import install
from tests.functions.eip.conftest import current, given, work_event
from tests.functions.intake.conftest import HEARTBEAT_TIMEOUT
from tests.functions.sweeper.test_sweep_pages_before_a_kill import Call, after, calls_made
from tests.functions.sweeper.test_sweeper_function import kept_to_the_end, record
from tests.functions.test_operations_template import alarms
from tests.support.emf import metric
from tests.support.functions import LambdaContext, load_function
from tests.support.stack import Stack

OWNER = "stack-a"  # tests/conftest.py's stack


@pytest.fixture
def eip_function(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    install()  # moto lacks CompleteLifecycleAction: the sandbox's emulation adds it
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "allocate")
    return load_function("eip")


def out_at_each(calls: list[Call], name: str) -> list[tuple[str, float]]:
    return [(call.name, metric(call.output, name)) for call in calls]


def alarm_dimensions(name: str) -> dict[str, str]:
    (alarm,) = [a for _, a in alarms() if a.get("Namespace") == "NodeCycle" and a.get("MetricName") == name]
    return {d["Name"]: d["Value"] if isinstance(d["Value"], str) else OWNER for d in alarm["Dimensions"]}


def emf_lines(output: str, name: str) -> list[dict[str, object]]:
    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{") and '"_aws"' in line]
    return [line for line in lines if name in line]


def dimensions_of(line: dict[str, object]) -> dict[str, object]:
    directive = line["_aws"]["CloudWatchMetrics"][0]  # type: ignore[index]
    names = {name for group in directive["Dimensions"] for name in group}
    return {name: line[name] for name in names}


def near_its_global_timeout() -> LifecycleRecord:
    started = datetime.now(UTC) - timedelta(seconds=HEARTBEAT_TIMEOUT * 100 - 60)
    stuck = kept_to_the_end(record("i-0aaaaaaaaaaaaaab1", Step.RELEASE_EIP, datetime.now(UTC), started))
    return stuck.model_copy(update={"verified_at": started})


def test_the_engines_settlement_near_the_global_timeout_is_out_before_its_next_call(
    eip_function: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a lifecycle whose step comes due at its action's last chance (the engine's guard settles it)
    stuck = given(stack, near_its_global_timeout())
    capsys.readouterr()

    # When the eip function runs its message: the settlement committed (the record says it was counted), then
    # Auto Scaling asked to complete the action
    with calls_made(capsys) as calls:
        response = eip_function.handler(work_event(stuck), LambdaContext())
    rest = capsys.readouterr().out

    # Then the page was out at every call after that commit (before: only once the handler returned, and an
    # invocation killed at any of them had it in memory alone)
    assert response.get("batchItemFailures", []) == []
    assert current(stack, stuck).outcome == "global-timeout-near"
    later = after(calls, "DynamoDB.PutItem", "global-timeout-near")
    assert later
    assert out_at_each(later, "GlobalTimeoutsNear") == [(call.name, 1) for call in later]
    # (counted once in all, on the series its alarm watches)
    output = calls[-1].output + rest
    assert metric(output, "GlobalTimeoutsNear") == 1
    (line,) = emf_lines(output, "GlobalTimeoutsNear")
    assert dimensions_of(line) == alarm_dimensions("GlobalTimeoutsNear")


def test_an_expiry_the_engines_heartbeat_finds_is_out_before_its_next_call(
    eip_function: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a lifecycle past its heartbeat deadline, its action confirmed before (moto has none now: it expired),
    # its node's cleanup to come after its completion
    now = datetime.now(UTC)
    lapsed = record("i-0aaaaaaaaaaaaaab2", Step.RELEASE_EIP, now, now - timedelta(hours=1))
    changes = {
        "plan": (Step.RELEASE_EIP, Step.COMPLETE, Step.CLEANUP, Step.DONE),
        "verified_at": now - timedelta(hours=1),
        "heartbeat_deadline": now - timedelta(seconds=30),
    }
    lapsed = given(stack, lapsed.model_copy(update=changes))
    capsys.readouterr()

    # When the eip function runs its message: the heartbeat finds the action gone, the lifecycle is committed past
    # its completion, and its cleanup sent to the drain queue
    with calls_made(capsys) as calls:
        response = eip_function.handler(work_event(lapsed), LambdaContext())
    rest = capsys.readouterr().out

    # Then the expiry's page was out at every call after that commit
    assert response.get("batchItemFailures", []) == []
    assert current(stack, lapsed).outcome == "action-expired"
    later = after(calls, "DynamoDB.PutItem", "action-expired")
    assert later
    assert out_at_each(later, "LifecycleActionsExpired") == [(call.name, 1) for call in later]
    output = calls[-1].output + rest
    assert metric(output, "LifecycleActionsExpired") == 1
    (line,) = emf_lines(output, "LifecycleActionsExpired")
    assert dimensions_of(line) == alarm_dimensions("LifecycleActionsExpired")
