"""A CompleteLifecycleAction whose answer was lost, on moto with the sandbox's lifecycle emulation and nodecycle's
own client configuration (botocore's standard retries): the call lands, its answer is a 5xx (or never comes), and
botocore's retry is told "No active Lifecycle Action found". That completion is the caller's own: the sweeper's
settlement near the global timeout (and the engine's completion alike) counts it completed with its result, and
its record does not say someone else settled it. A retry after an attempt that did not land (throttled) still
finds an action settled elsewhere when it finds none."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders

from nodecycle.adapters.aws.autoscaling import AutoscalingActions
from nodecycle.adapters.aws.clients import CLIENT_CONFIG
from nodecycle.domain.completion import SETTLED_ELSEWHERE, CompleteAction
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.model import ActionRef, LifecycleRecord, Step, Transition, global_deadline
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.sweep.lifecycles import LifecycleRepair
from nodecycle_sandbox.aws import TERMINATING
from nodecycle_sandbox.aws.group import HookSpec
from tests.sandbox.aws.conftest import REGION, Emulation, aws  # noqa: F401  (the emulation in process)
from tests.support.fakes import FakeClock, FakeMetrics, InMemoryRecords, RecordingQueues
from tests.unit.sweeper.test_orphans import AMPLE

HOOK = HookSpec("drain", TERMINATING, heartbeat_timeout=300, default_result="ABANDON")
OPERATION = "before-send.auto-scaling.CompleteLifecycleAction"


@pytest.fixture
def terminating(aws: Emulation) -> ActionRef:  # noqa: F811
    """The action of an instance the group is terminating, held by the drain hook."""
    group = aws.group(HOOK, size=1)
    (instance,) = group.instances()
    group.terminate(instance)
    (action,) = [a for a in group.actions() if a.active]
    return ActionRef(
        group="workers",
        hook="drain",
        instance_id=instance,
        token=action.token,
        transition=Transition.TERMINATING,
    )


@pytest.fixture
def autoscaling(aws: Emulation) -> Any:  # noqa: F811
    """An Auto Scaling client as nodecycle makes them (its retry mode), on the emulation."""
    return boto3.client(
        "autoscaling",
        region_name=REGION,
        aws_access_key_id="AKIATESTSWEEPER00000",
        aws_secret_access_key="testing",
        config=CLIENT_CONFIG,
    )


def first_answer(client: Any, status: int, code: str) -> Callable[[], int]:
    """The first CompleteLifecycleAction attempt reaches Auto Scaling (the emulation's handler runs it) and its
    answer is replaced by ``status``/``code``: lost, as after a 5xx or a throttle. The attempts made, to ask."""
    attempts = [0]

    def answer(**_: Any) -> AWSResponse | None:
        attempts[0] += 1
        if attempts[0] > 1:
            return None
        body = f"<ErrorResponse><Error><Code>{code}</Code><Message>lost</Message></Error></ErrorResponse>"
        return AWSResponse("https://autoscaling", status, HTTPHeaders(), _Raw(body.encode()))

    client.meta.events.register(OPERATION, answer, unique_id="tests.FirstAnswer")
    return lambda: attempts[0]


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


def test_a_completion_whose_answer_was_lost_is_the_callers_own(
    aws: Emulation,  # noqa: F811
    terminating: ActionRef,
    autoscaling: Any,
) -> None:
    # Given an action whose completion lands but whose answer is lost (a 500 after Auto Scaling took it)
    attempts = first_answer(autoscaling, 500, "InternalFailure")

    # When the adapter completes it (botocore retries, and the retry is told there is no active action)
    completed = AutoscalingActions(autoscaling).complete(terminating, ActionResult.CONTINUE)

    # Then the completion is its own, as Auto Scaling recorded it: with its result, once
    assert attempts() == 2
    (action,) = [a for a in aws.control.actions() if a.token == terminating.token]
    assert (action.outcome, action.result) == ("completed", "CONTINUE")
    assert completed is True


def test_a_retry_after_an_attempt_that_did_not_land_still_finds_the_action_settled_elsewhere(
    aws: Emulation,  # noqa: F811
    terminating: ActionRef,
    autoscaling: Any,
) -> None:
    # Given an action settled by someone else, and a completion of ours whose first attempt is throttled (the
    # throttle answers before the call reaches the action: replaced here after it, so completed by "another")
    attempts = first_answer(autoscaling, 400, "Throttling")

    # When the adapter completes it
    completed = AutoscalingActions(autoscaling).complete(terminating, ActionResult.CONTINUE)

    # Then a throttled attempt is no completion of ours: settled elsewhere, as without a retry
    assert attempts() == 2
    assert completed is False


def test_the_sweepers_settlement_whose_answer_was_lost_is_counted_and_recorded_as_its_own(
    aws: Emulation,  # noqa: F811
    terminating: ActionRef,
    autoscaling: Any,
) -> None:
    # Given a stalled drain at the last sweep before its action's global timeout, and the sweeper's completion
    # landing with its answer lost
    now = datetime.now(UTC)
    started = now - timedelta(seconds=300 * 100 - 120)
    record = LifecycleRecord(
        id=f"{terminating.instance_id}/terminate/{terminating.token}",
        owner="stack-a",
        instance_id=terminating.instance_id,
        transition=Transition.TERMINATING,
        token=terminating.token,
        group=terminating.group,
        hook=terminating.hook,
        plan=(Step.ACQUIRE_SLOT, Step.CORDON, Step.EVICT, Step.COMPLETE, Step.CLEANUP, Step.DONE),
        step=Step.EVICT,
        seq=9,
        received_at=started,
        started_at=started,
        updated_at=now - timedelta(minutes=10),
        due_at=now - timedelta(minutes=10),
        heartbeat_timeout=300,
        heartbeat_deadline=now + timedelta(seconds=200),
        global_deadline=global_deadline(started, 300),
        verified_at=started,
        node="ip-10-0-1-23.eu-west-1.compute.internal",
    )
    records, metrics, clock = InMemoryRecords(), FakeMetrics(), FakeClock(now)
    assert records.create(record)
    port = AutoscalingActions(autoscaling)
    repair = LifecycleRepair(
        records=records,
        dispatcher=Dispatcher(records=records, queues=RecordingQueues(), clock=clock, metrics=metrics),
        autoscaling=port,
        completion=CompleteAction(port, metrics, records),
        metrics=metrics,
        resume_grace=timedelta(minutes=1),
        margin=timedelta(minutes=1),
        interval=timedelta(minutes=5),
        settle_before=timedelta(minutes=7),
        lateness=timedelta(seconds=60),  # (the schedule's minute, as settings reckon it)
        failure_result=lambda _: ActionResult.CONTINUE,
        clock=clock,
    )
    first_answer(autoscaling, 500, "InternalFailure")

    # When the sweep settles it
    counts = repair([record], now, AMPLE)

    # Then its report, its metrics and the record say the sweeper completed it, with its result
    assert counts["LifecyclesSettled"] == 1
    settled = records.get(record.id)
    assert settled is not None
    assert (settled.outcome, settled.result) == ("settled-by-sweeper", ActionResult.CONTINUE)
    assert SETTLED_ELSEWHERE not in settled.extra
    assert settled.action_confirmed
    assert metrics.counts.get("LifecycleActionsCompleted[result=CONTINUE]") == 1
    assert "LifecycleActionsSettledElsewhere" not in metrics.counts
