"""A step of the drain and eip functions whose Auto Scaling call hangs (an endpoint that takes the connection and
never answers; the table and queues on moto): its calls end within the step's time of the invocation, and the
engine, in the reserve after it, commits the step's retry and sends its message. Without a cut, the call waits
out five read timeouts (100 s) and the function is killed mid-call: nothing committed, the message back only
after the queue's visibility timeout. Cut to the invocation's end alone, it takes the reserve too: the engine's
commit is then refused for want of time and the record fails all the same."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle.domain.model import LifecycleRecord, Step, Transition, global_deadline
from nodecycle.domain.ports.lifecycle import WorkMessage
from nodecycle.entrypoints import BatchFailed
from nodecycle.wiring.common import MIN_RUN_SECONDS, STEP_RESERVE_SECONDS
from tests.functions.test_aws_calls_within_time import LATE_SECONDS, HungEndpoint
from tests.support.events import sqs_event
from tests.support.functions import LambdaContext, load_function
from tests.support.stack import Stack, receive_all

HEARTBEAT_TIMEOUT = 600
# The invocation's time left when the message is taken: the step's calls get MIN_RUN_SECONDS + 3 of it (with + 1, a
# loaded machine spent it on the step's first calls, the record's read and the completion's claim: 5.3 s of the 6 in
# one run, and the step then sent Auto Scaling no attempt, as it should not with 0.7 s left)
REMAINING = MIN_RUN_SECONDS + 3.0 + STEP_RESERVE_SECONDS
PLANS = {
    "drain": (Step.ACQUIRE_SLOT, Step.CORDON, Step.EVICT, Step.COMPLETE, Step.CLEANUP, Step.DONE),
    "eip": (Step.RELEASE_EIP, Step.COMPLETE, Step.DONE),
}


@pytest.fixture
def hung_autoscaling(monkeypatch: pytest.MonkeyPatch) -> Iterator[HungEndpoint]:
    endpoint = HungEndpoint()
    monkeypatch.setenv("AWS_ENDPOINT_URL_AUTO_SCALING", endpoint.url)  # moto passes what it does not serve
    yield endpoint
    endpoint.close()


def completing(function: str, now: datetime) -> LifecycleRecord:
    """A terminate lifecycle at its completion, run by ``function``."""
    token = str(uuid.uuid4())
    return LifecycleRecord(
        id=f"i-0aaaaaaaaaaaaaaa1/terminate/{token}",
        owner="stack-a",
        instance_id="i-0aaaaaaaaaaaaaaa1",
        transition=Transition.TERMINATING,
        token=token,
        group="nodes-general",
        hook="nodecycle-terminate",
        plan=PLANS[function],
        step=Step.COMPLETE,
        seq=4,
        received_at=now,
        started_at=now,
        updated_at=now,
        due_at=now,
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
        heartbeat_deadline=now + timedelta(seconds=HEARTBEAT_TIMEOUT),
        global_deadline=global_deadline(now, HEARTBEAT_TIMEOUT),
    )


def handled_in_time(function: str, body: str, hung: HungEndpoint) -> None:
    """``function`` takes the work message ``body`` with REMAINING seconds of its time left: it ends within them,
    having asked the hung Auto Scaling, its message not failed (which would bring it back only after the queue's
    visibility timeout)."""
    started = time.monotonic()
    try:
        response = load_function(function).handler(
            sqs_event(body), LambdaContext(remaining_millis=int(REMAINING * 1000))
        )
    except BatchFailed as failed:
        pytest.fail(f"the message failed, back after the visibility timeout: {failed.__cause__!r}")
    assert time.monotonic() - started < REMAINING + LATE_SECONDS
    assert hung.requests >= 1
    assert response == {"batchItemFailures": []}


@pytest.mark.parametrize("function", ["drain", "eip"])
def test_a_step_whose_aws_call_hangs_is_retried_within_the_invocations_time(
    stack: Stack, hung_autoscaling: HungEndpoint, function: str
) -> None:
    # Given a lifecycle at its completion, and Auto Scaling taking each call and never answering
    records = DynamoRecordStore(stack.table, ttl=timedelta(days=1))
    record = completing(function, datetime.now(UTC))
    assert records.create(record)
    queue = stack.drain_queue if function == "drain" else stack.eip_queue
    body = WorkMessage(record_id=record.id, seq=record.seq, step=Step.COMPLETE).model_dump_json()

    # When the function takes its message with REMAINING seconds of its time left
    # Then the invocation ended within its time, the step asked Auto Scaling only what its time allowed...
    handled_in_time(function, body, hung_autoscaling)
    # ...and its retry is committed and sent: the completion is tried again, not completed by mistake (two
    # commits: the completion's claim before its call, then the retry, which clears the claim)
    after = records.get(record.id)
    assert after is not None
    assert (after.step, after.seq, after.attempts, after.finished) == (
        Step.COMPLETE,
        record.seq + 2,
        1,
        False,
    )
    assert "completion_claim" not in after.extra
    sent = [json.loads(message["Body"]) for message in receive_all(queue)]
    assert [(message["record_id"], message["seq"]) for message in sent] == [(record.id, record.seq + 2)]
