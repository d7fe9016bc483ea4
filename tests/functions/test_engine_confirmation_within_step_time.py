"""The engine's confirmation before a disruptive step (``StepEngine._verify``: where the instance is, a heartbeat)
whose Auto Scaling call hangs, in the drain and eip functions (the table and queues on moto): it ends within the
step's time of the invocation, as the step's own calls do (tests/functions/test_step_calls_within_time.py), and
the engine, in the reserve after it, commits the step's retry and sends its message. Cut to the invocation's end
alone, it took the reserve: the engine's commit was refused for want of time, and the message came back only after
the queue's visibility timeout."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle.domain.model import Step
from nodecycle.domain.ports.lifecycle import WorkMessage
from tests.functions.test_aws_calls_within_time import HungEndpoint
from tests.functions.test_step_calls_within_time import completing, handled_in_time, hung_autoscaling
from tests.support.stack import Stack, receive_all

__all__ = ["hung_autoscaling"]  # (the fixture)

# The first step of each function's plan that disrupts anything, which Auto Scaling confirms first
FIRST_DISRUPTIVE = {"drain": Step.ACQUIRE_SLOT, "eip": Step.RELEASE_EIP}


@pytest.mark.parametrize("function", ["drain", "eip"])
def test_the_confirmation_before_a_disruptive_step_whose_call_hangs_leaves_the_engine_its_reserve(
    stack: Stack, hung_autoscaling: HungEndpoint, function: str
) -> None:
    # Given a terminate lifecycle at its first disruptive step, its action not confirmed yet, and Auto Scaling
    # taking each call and never answering
    records = DynamoRecordStore(stack.table, ttl=timedelta(days=1))
    step = FIRST_DISRUPTIVE[function]
    record = completing(function, datetime.now(UTC)).model_copy(update={"step": step, "verified_at": None})
    assert records.create(record)
    queue = stack.drain_queue if function == "drain" else stack.eip_queue
    body = WorkMessage(record_id=record.id, seq=record.seq, step=step).model_dump_json()

    # When the function takes its message with REMAINING seconds of its time left
    # Then the invocation ended within its time, having asked Auto Scaling only what the step's time allowed...
    handled_in_time(function, body, hung_autoscaling)
    # ...and the step's retry is committed and sent, nothing disrupted (the action still unconfirmed)
    after = records.get(record.id)
    assert after is not None
    assert (after.step, after.seq, after.attempts, after.verified_at) == (step, record.seq + 1, 1, None)
    sent = [json.loads(message["Body"]) for message in receive_all(queue)]
    assert [(message["record_id"], message["seq"]) for message in sent] == [(record.id, record.seq + 1)]
