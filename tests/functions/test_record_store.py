"""The lifecycle record store on DynamoDB (moto): a conditional write whose answer was lost and that
botocore sent again is recognised as this writer's own, not read as a lost race."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from nodecycle.adapters.aws.records import BATCH_GET_REQUESTS, DynamoRecordStore
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import Step
from nodecycle.domain.ports.lifecycle import ActionClaim, Claimed, TokenTaken
from tests.support.fakes import T0
from tests.unit.foundation.test_engine import PLAN, make_record

TABLE = "records"


class AnswerLost:
    """A DynamoDB client whose every PutItem lands but whose answer is lost, so that botocore sends the
    same request again (standard retry mode does, after a timeout or a 500 served after the write)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.sent = 0

    def put_item(self, **request: Any) -> Any:
        self.sent += 1
        self._client.put_item(**request)  # applied; its answer never arrives
        self.sent += 1
        return self._client.put_item(**request)  # the retry

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


@pytest.fixture
def dynamodb() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="eu-west-1")
        client.create_table(
            TableName=TABLE,
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            AttributeDefinitions=[
                {"AttributeName": "id", "AttributeType": "S"},
                {"AttributeName": "open_owner", "AttributeType": "S"},
                {"AttributeName": "due_epoch", "AttributeType": "N"},
            ],
            GlobalSecondaryIndexes=[  # as template.yaml declares it
                {
                    "IndexName": "open-by-due",
                    "KeySchema": [
                        {"AttributeName": "open_owner", "KeyType": "HASH"},
                        {"AttributeName": "due_epoch", "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "ALL"},
                }
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        yield client


def test_a_write_that_landed_and_was_sent_again_is_this_writers_own(dynamodb: Any) -> None:
    # Given a record, and a client whose writes land but whose answers are lost (and are sent again)
    DynamoRecordStore(TABLE, ttl=timedelta(days=14), dynamodb=dynamodb).create(make_record(PLAN))
    lossy = AnswerLost(dynamodb)
    store = DynamoRecordStore(TABLE, ttl=timedelta(days=14), dynamodb=lossy)  # type: ignore[arg-type]
    current = store.get(make_record(PLAN).id)
    assert current is not None

    # When the next step is committed, and a new record created, each sent twice
    committed = store.commit(
        current.model_copy(update={"step": Step.CORDON, "seq": current.seq + 1}), current.seq
    )
    created = store.create(
        make_record(PLAN, id="i-0fedcba9876543210/terminate/token", instance_id="i-0fedcba9876543210")
    )

    # Then both are the writer's own success: the retry's ConditionalCheckFailed found its own item
    assert lossy.sent == 4
    assert (committed, created) == (True, True)
    stored = store.get(current.id)
    assert stored is not None
    assert (stored.step, stored.seq) == (Step.CORDON, current.seq + 1)


def test_a_write_that_lost_to_another_writer_is_still_a_lost_race(dynamodb: Any) -> None:
    # Given a record that another delivery moved on
    store = DynamoRecordStore(TABLE, ttl=timedelta(days=14), dynamodb=dynamodb)
    record = make_record(PLAN)
    store.create(record)
    assert store.commit(record.model_copy(update={"step": Step.CORDON, "seq": record.seq + 1}), record.seq)

    # When this delivery commits its own next state from the same seq
    mine = record.model_copy(update={"step": Step.EVICT, "seq": record.seq + 1})

    # Then it lost: the stored item is not its write
    assert not store.commit(mine, record.seq)
    assert not store.create(record)


@pytest.mark.parametrize("listing", ["open_records", "scan"])  # the sweeper's; `nodecycle status --all`'s
def test_one_unreadable_record_does_not_hide_the_others(
    dynamodb: Any, caplog: pytest.LogCaptureFixture, listing: str
) -> None:
    # Given two open lifecycles, one of them written by a newer release (a step this one does not know: the
    # stack was rolled back) or edited by hand
    store = DynamoRecordStore(TABLE, ttl=timedelta(days=14), dynamodb=dynamodb)
    good = make_record(PLAN)
    odd = make_record(PLAN, id="i-0fedcba9876543210/terminate/token", instance_id="i-0fedcba9876543210")
    store.create(good)
    store.create(odd)
    dynamodb.update_item(
        TableName=TABLE,
        Key={"id": {"S": odd.id}},
        UpdateExpression="SET step = :step",
        ExpressionAttributeValues={":step": {"S": "warp-drive"}},
    )

    # When the sweeper lists the open lifecycles, or an operator all of them
    listed = list(getattr(store, listing)(good.owner))

    # Then it gets the readable one, and the other is named in an error, not raised through the whole listing
    assert [record.id for record in listed] == [good.id]
    assert any(odd.id in message and "step" in message for message in caplog.messages)


def test_an_open_record_whose_step_is_due_past_its_global_timeout_outlives_it(dynamodb: Any) -> None:
    # Given a lifecycle whose action is long settled but whose cleanup still looks at its node (a node kept
    # cordoned in a running warm pool, weeks on): its next step is due past its global timeout + the TTL
    store = DynamoRecordStore(TABLE, ttl=timedelta(days=14), dynamodb=dynamodb)
    record = make_record(PLAN, Step.CLEANUP)
    watching = record.model_copy(update={"due_at": record.global_deadline + timedelta(days=21)})

    # When it is written
    assert store.create(watching)

    # Then DynamoDB's TTL keeps it at least the TTL past that due time (not deleted under its watch)
    item = dynamodb.get_item(TableName=TABLE, Key={"id": {"S": record.id}})["Item"]
    assert int(item["expires_at"]["N"]) == int((watching.due_at + timedelta(days=14)).timestamp())


def test_an_events_intake_progress_only_moves_forward(dynamodb: Any) -> None:
    # Given an event whose intake got through 40 of its instances (saved by the delivery that got furthest)
    store = DynamoRecordStore(TABLE, ttl=timedelta(days=7), dynamodb=dynamodb)
    assert store.progress("event-1#names") == 0
    store.save_progress("event-1#names", 40, T0)

    # When a slower delivery of the same event saves less, and the item's write is sent again
    store.save_progress("event-1#names", 25, T0)
    store.save_progress("event-1#names", 40, T0)

    # Then the progress stays where the furthest got, apart from the records and expiring with the table's TTL
    assert store.progress("event-1#names") == 40
    assert store.progress("event-2#names") == 0
    assert list(store.scan("stack-a")) == []
    item = dynamodb.get_item(TableName=TABLE, Key={"id": {"S": "intake-progress#event-1#names"}})["Item"]
    assert int(item["expires_at"]["N"]) > T0.timestamp()


def test_the_reads_of_one_item_see_the_latest_write_while_the_tables_copies_lag(dynamodb: Any) -> None:
    # Given the table's writes not yet copied to where an eventually consistent read may read them (the
    # sandbox's lag: such a read, the default of GetItem, sees each item as it was before)
    from nodecycle_sandbox.aws.dynamodb_index_lag import LAG, install

    install()
    store = DynamoRecordStore(TABLE, ttl=timedelta(days=14), dynamodb=dynamodb)
    record = make_record(PLAN)
    store.save_progress("event-1#names", 10, T0)
    with LAG.held(TABLE):
        # When a record is written with its action's claim, moved on, and an event's progress saved
        assert store.write_claimed(record, None) is Claimed.WRITTEN
        assert store.commit(
            record.model_copy(update={"step": Step.CORDON, "seq": record.seq + 1}), record.seq
        )
        store.save_progress("event-1#names", 40, T0)

        # Then what the engine and intake decide on is read as written: the claim (a second lifecycle of the
        # action is refused by it), the record's seq (the next commit's condition), the progress (the
        # instances not taken in again). A stale read would see no claim, an older seq, 10.
        assert store.claim(record) == ActionClaim.of(record)
        stored = store.get(record.id)
        assert stored is not None
        assert (stored.step, stored.seq) == (Step.CORDON, record.seq + 1)
        assert store.progress("event-1#names") == 40
        # (the sandbox's lag is on: the same item read without ConsistentRead is the older one)
        stale = dynamodb.get_item(TableName=TABLE, Key={"id": {"S": record.id}})
        assert "Item" not in stale


class ReasonsWithoutItems:
    """A DynamoDB client whose refused transactions' cancellation reasons carry no item (an answer without
    ReturnValuesOnConditionCheckFailure's item: DynamoDB returns it, this stands for one that would not)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.read: list[str] = []

    def transact_write_items(self, **request: Any) -> Any:
        try:
            return self._client.transact_write_items(**request)
        except ClientError as error:
            for reason in error.response.get("CancellationReasons") or []:
                reason.pop("Item", None)
            raise

    def get_item(self, **request: Any) -> Any:
        self.read.append(request["Key"]["id"]["S"])
        return self._client.get_item(**request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_a_token_refusal_that_does_not_name_its_holder_has_it_read(dynamodb: Any) -> None:
    # Given a token held by a record, and a refusal of another instance's record of it whose answer names no holder
    client = ReasonsWithoutItems(dynamodb)
    store = DynamoRecordStore(TABLE, ttl=timedelta(days=14), dynamodb=client)  # type: ignore[arg-type]
    record = make_record(PLAN)
    crossed = record.model_copy(
        update={"id": f"i-0fedcba9876543210/terminate/{record.token}", "instance_id": "i-0fedcba9876543210"}
    )
    assert store.write_claimed(record, None) is Claimed.WRITTEN

    # When the crossed record is written, Then the refusal names the holder, read from the token's item
    assert store.write_claimed(crossed, None) == TokenTaken(record.id)
    assert client.read == [f"token#{record.token}"]


class UnprocessedKeys:
    """A DynamoDB client whose BatchGetItem answers the first key of a request only and names the others
    UnprocessedKeys, as DynamoDB does for the keys it could not read (throughput exceeded on them, an internal
    failure): ``answered_in_part`` requests so, then whole ones (None: every request)."""

    def __init__(self, client: Any, answered_in_part: int | None) -> None:
        self._client = client
        self._in_part = answered_in_part
        self.requests = 0

    def batch_get_item(self, RequestItems: Any) -> Any:  # (botocore's parameter name)
        self.requests += 1
        if self._in_part is not None and self.requests > self._in_part:
            return self._client.batch_get_item(RequestItems=RequestItems)
        ((table, asked),) = RequestItems.items()
        first, *others = asked["Keys"]
        answer = self._client.batch_get_item(RequestItems={table: {**asked, "Keys": [first]}})
        answer["UnprocessedKeys"] = {table: {**asked, "Keys": others}} if others else {}
        return answer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def _three_records(dynamodb: Any) -> list[str]:
    """Three records of an instance written to the table; their ids, and a fourth that none has."""
    store = DynamoRecordStore(TABLE, ttl=timedelta(days=14), dynamodb=dynamodb)
    ids = []
    for cause in ("spot-interruption", "scheduled-change", "rebalance"):
        record = make_record(PLAN, id=f"i-0123456789abcdef0/{cause}")
        assert store.create(record)
        ids.append(record.id)
    return [*ids, "i-0123456789abcdef0/none"]


def test_records_read_together_are_those_that_exist_each_read_as_last_written(dynamodb: Any) -> None:
    # Given three records, then each moved on while the table's copies lag (the sandbox's lag: an eventually
    # consistent read, BatchGetItem's default, sees each as it was before)
    from nodecycle_sandbox.aws.dynamodb_index_lag import LAG, install

    install()
    ids = _three_records(dynamodb)
    store = DynamoRecordStore(TABLE, ttl=timedelta(days=14), dynamodb=dynamodb)
    with LAG.held(TABLE):
        for record_id in ids[:3]:
            current = store.get(record_id)
            assert current is not None
            assert store.commit(current.model_copy(update={"seq": current.seq + 1}), current.seq)

        # When they are read together, with an id named twice and one no record has
        found = store.get_many([*ids, ids[0]])

        # Then the three are read, each as last written
        assert sorted(found) == sorted(ids[:3])
        assert {record.seq for record in found.values()} == {1}
        # (the sandbox's lag is on: the same keys read without ConsistentRead are the older items)
        stale = dynamodb.batch_get_item(RequestItems={TABLE: {"Keys": [{"id": {"S": i}} for i in ids[:3]]}})
        assert {item["seq"]["N"] for item in stale["Responses"][TABLE]} == {"0"}


def test_keys_a_batch_read_leaves_unprocessed_are_asked_again(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given three records, and a table whose first answer reads one key of a request and leaves the others
    monkeypatch.setattr("nodecycle.adapters.aws.records.time.sleep", lambda seconds: None)
    ids = _three_records(dynamodb)
    partial = UnprocessedKeys(dynamodb, answered_in_part=1)
    store = DynamoRecordStore(TABLE, ttl=timedelta(days=14), dynamodb=partial)  # type: ignore[arg-type]

    # When they are read together
    found = store.get_many(ids)

    # Then the keys left unprocessed are asked again (botocore does not): all three read, in two requests
    assert sorted(found) == sorted(ids[:3])
    assert partial.requests == 2


def test_keys_left_unprocessed_at_every_request_are_a_transient_failure(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a table that reads one key of each request only (throttled for as long as the reads last), and more
    # keys than requests
    monkeypatch.setattr("nodecycle.adapters.aws.records.time.sleep", lambda seconds: None)
    ids = [*_three_records(dynamodb), *(f"i-0123456789abcdef{n}/none" for n in range(1, BATCH_GET_REQUESTS))]
    partial = UnprocessedKeys(dynamodb, answered_in_part=None)
    store = DynamoRecordStore(TABLE, ttl=timedelta(days=14), dynamodb=partial)  # type: ignore[arg-type]

    # When they are read together, Then what is left unread after the requests is a failure worth retrying, not
    # records taken for absent
    with pytest.raises(TransientError, match="left unprocessed"):
        store.get_many(ids)
    assert partial.requests == BATCH_GET_REQUESTS
