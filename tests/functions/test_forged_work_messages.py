"""Work messages that nodecycle did not send: anyone allowed to send to a work queue can put any body there.
One that names no lifecycle is dropped, as a body that is not a work message is: never retried into the
dead-letter queue (and its alarm), where an operator's redrive would only send it again."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import ModuleType

import pytest

from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle.domain.model import Step
from nodecycle.domain.ports.lifecycle import Claimed, WorkMessage
from nodecycle.entrypoints import BatchFailed
from tests.support.emf import metric
from tests.support.events import sqs_event
from tests.support.functions import LambdaContext, load_function
from tests.support.stack import Stack
from tests.unit.eip.fakes import launch_record

INSTANCE = "i-0aaaaaaaaaaaaaaa1"


@pytest.fixture
def eip_fn(stack: Stack) -> ModuleType:
    return load_function("eip")


def store(stack: Stack) -> DynamoRecordStore:
    return DynamoRecordStore(stack.table, ttl=timedelta(days=14))


def claim_id(stack: Stack) -> str:
    """The id of the item that holds a real launch action's claim, beside its record."""
    record = launch_record(INSTANCE, at=datetime.now(UTC))
    assert store(stack).write_claimed(record, None) is Claimed.WRITTEN
    return f"claim#{INSTANCE}#launch#{record.hook}"


def token_id(stack: Stack) -> str:
    """The id of the item that holds a real launch action's token for its record."""
    record = launch_record(INSTANCE, at=datetime.now(UTC))
    assert store(stack).write_claimed(record, None) is Claimed.WRITTEN
    return f"token#{record.token}"


def progress_id(stack: Stack) -> str:
    """The id of the item that holds an AWS Health event's intake progress."""
    key = f"{uuid.uuid4()}#0123456789abcdef"
    store(stack).save_progress(key, 3, datetime.now(UTC))
    return f"intake-progress#{key}"


@pytest.mark.parametrize(
    "forged",
    [
        pytest.param(claim_id, id="an-action-claim"),
        pytest.param(token_id, id="a-tokens-holder"),
        pytest.param(progress_id, id="an-intake-progress"),
        pytest.param(lambda stack: "", id="empty"),
        pytest.param(lambda stack: f"{INSTANCE}/launch/{'x' * 3000}", id="longer-than-a-table-key"),
    ],
)
def test_a_work_message_naming_no_lifecycle_record_is_dropped_not_retried(
    eip_fn: ModuleType, stack: Stack, forged: Callable[[Stack], str], capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a work message someone sent to the queue under an id that no lifecycle record has or could have:
    # another item of the table (an action's claim, a token's holder, an event's intake progress), or one the table refuses
    body = WorkMessage(record_id=forged(stack), seq=0, step=Step.COMPLETE).model_dump_json()

    # When the function takes it
    try:
        response = eip_fn.handler(sqs_event(body), LambdaContext())
    except BatchFailed as failed:
        pytest.fail(f"the message failed, to be retried into the dead-letter queue: {failed.__cause__!r}")

    # Then it is dropped as not valid, counted as rejected
    assert response == {"batchItemFailures": []}
    assert metric(capsys.readouterr().out, "WorkMessagesRejected") == 1
