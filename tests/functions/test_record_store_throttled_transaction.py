"""A lifecycle record written with its action's claim (one DynamoDB transaction) while DynamoDB throttles.

DynamoDB refuses a throttled PutItem or GetItem with ``ProvisionedThroughputExceededException``, which botocore's
standard mode retries within the call (a backoff of up to a second, then again). A throttled TransactWriteItems
is answered otherwise: DynamoDB cancels it, ``TransactionCanceledException`` whose ``CancellationReasons`` say
``ThrottlingError`` (or ``ProvisionedThroughputExceeded``) for the item throttled and ``None`` for the others
(the API reference), and nothing is written. botocore does not retry that code, so one throttled attempt failed
the call at once: intake handed its event to the intake queue for 10 s, a lifecycle entered the budget 10 s late
while slots could stand idle, and a drain's step waited for the engine's backoff, where any other throttled
call costs its lifecycle well under a second. Measured by ``python -m benchmarks --only storms``.

These run the functions' own client (``adapters.aws.clients.client``: its retry settings and hooks) against the
sandbox's AWS endpoint, whose fault injector answers a throttled transaction with DynamoDB's own wire shape.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest

from nodecycle.adapters.aws.clients import MAX_ATTEMPTS, client
from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle.domain.errors import TransientError
from nodecycle.domain.ports.lifecycle import Claimed
from nodecycle_sandbox.aws.faults import FAULTS
from nodecycle_sandbox.aws.server import MotoServer
from nodecycle_sandbox.faults import Fault
from tests.unit.foundation.test_engine import PLAN, make_record

REGION = "eu-west-1"
FUNCTION_KEY = "AKIAINTAKEFUNCTION01"  # the faults are armed for this caller alone
OPERATOR_KEY = "AKIASANDBOXOPERATOR1"
TABLE = "throttled-transactions"


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    server = MotoServer()
    yield server.start()
    server.stop()


@pytest.fixture
def store(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[DynamoRecordStore]:
    operator = boto3.client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=OPERATOR_KEY,
        aws_secret_access_key="secret",
    )
    operator.create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    # The function's environment, as Lambda gives it: the client is made from it as in production
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", FUNCTION_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    yield DynamoRecordStore(TABLE, ttl=timedelta(days=1), dynamodb=client("dynamodb"))
    FAULTS.disarm()
    operator.delete_table(TableName=TABLE)


def _throttle_transactions(limit: int | None) -> None:
    FAULTS.arm_for(
        [Fault("t", "aws-throttle", target="dynamodb.TransactWriteItems", limit=limit)],
        seed=1,
        callers=[FUNCTION_KEY],
    )


def test_a_transaction_throttled_once_is_written_in_the_same_call_as_any_throttled_call(
    store: DynamoRecordStore,
) -> None:
    # Given DynamoDB throttling the function's next transaction (cancelled for throughput), then taking them
    _throttle_transactions(limit=1)
    record = make_record(PLAN)

    # When the record is written with its action's claim
    written = store.write_claimed(record, None)

    # Then it is written in this call, as a throttled PutItem would be: the attempt after the throttled one
    # landed, and the step (intake's event, a drain's commit) is not left to a retry seconds later
    assert written is Claimed.WRITTEN
    assert len(FAULTS.firings()) == 1
    stored = store.get(record.id)
    assert stored is not None
    assert stored.seq == record.seq


def test_a_transaction_throttled_at_every_attempt_fails_after_the_functions_attempts(
    store: DynamoRecordStore,
) -> None:
    # Given DynamoDB throttling every transaction of the function
    _throttle_transactions(limit=None)

    # When the record is written with its action's claim, Then the call is tried as often as any throttled call
    # (MAX_ATTEMPTS), no more, and its step is left to retry later; nothing was written
    with pytest.raises(TransientError):
        store.write_claimed(make_record(PLAN), None)
    assert len(FAULTS.firings()) == MAX_ATTEMPTS
    assert store.get(make_record(PLAN).id) is None


@pytest.mark.parametrize("reason", ["ConditionalCheckFailed", "TransactionConflict"])
def test_a_transaction_cancelled_for_another_reason_is_not_retried_in_the_call(
    store: DynamoRecordStore, reason: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a transaction cancelled for its condition, or for another writer's transaction on an item (what the
    # record store tells apart, or the engine retries later): no throttle
    record = make_record(PLAN)
    store.write_claimed(record, None)
    if reason == "TransactionConflict":
        FAULTS.arm_for(
            [Fault("c", "dynamodb-conflict", target="dynamodb.TransactWriteItems")],
            seed=1,
            callers=[FUNCTION_KEY],
        )
        # When it is written again, Then one attempt only: the answer is the call's
        with pytest.raises(TransientError):
            store.write_claimed(make_record(PLAN, id="i-0fedcba9876543210/terminate/t"), None)
        assert len(FAULTS.firings()) == 1
        return
    # (the record exists: a second creation is cancelled for its condition, at the first attempt)
    attempts: list[Any] = []

    def counted(environ: dict[str, Any]) -> None:
        attempts.append(environ)  # (and no fault: DynamoDB answers itself)

    monkeypatch.setattr(FAULTS, "decide", counted)
    assert store.write_claimed(record.model_copy(update={"token": "other"}), None) is not Claimed.WRITTEN
    assert len(attempts) == 1
