"""The lifecycle record store on DynamoDB: one item per lifecycle action, conditional writes only."""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Iterator
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, cast

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError
from pydantic import ValidationError

from nodecycle.adapters.aws.clients import LazyClient, error_code, transient_errors
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import ActionRef, LifecycleRecord
from nodecycle.domain.ports.lifecycle import ActionClaim, Claimed, TokenTaken

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import PutTypeDef, TransactWriteItemTypeDef

log = logging.getLogger(__name__)

OPEN_INDEX = "open-by-due"  # sparse: only unfinished records carry its key attributes
# BatchGetItem: at most 100 keys a request. It answers what it could read and names the rest UnprocessedKeys
# (throughput exceeded on some, the 16 MB answer limit, an internal failure), which botocore does not ask again; asked
# again here, backing off as the DynamoDB API reference recommends, this many requests in all.
BATCH_GET_MAX = 100
BATCH_GET_REQUESTS = 4
BATCH_GET_BACKOFF = 0.05  # seconds before the second request, doubled before each next one

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


class DynamoRecordStore:
    def __init__(self, table: str, ttl: timedelta, dynamodb: DynamoDBClient | None = None) -> None:
        self._table = table
        self._ttl = ttl
        self._dynamodb: LazyClient[DynamoDBClient] = LazyClient("dynamodb", dynamodb)

    def create(self, record: LifecycleRecord) -> bool:
        return self._put(record, *_record_condition(None))

    def commit(self, record: LifecycleRecord, expected_seq: int) -> bool:
        return self._put(record, *_record_condition(expected_seq))

    def claim(self, action: ActionRef) -> ActionClaim | None:
        with transient_errors("reading a lifecycle action's claim"):
            response = self._dynamodb().get_item(
                TableName=self._table, Key={"id": {"S": _claim_id(action)}}, ConsistentRead=True
            )
        item = response.get("Item")
        if not item:
            return None
        return ActionClaim(item["lifecycle"]["S"], datetime.fromisoformat(item["since"]["S"]))

    def write_claimed(
        self,
        record: LifecycleRecord,
        expected: ActionClaim | None,
        expected_seq: int | None = None,
        *,
        displacing: str | None = None,
    ) -> Claimed | TokenTaken:
        item = self._to_item(record)
        claim = ActionClaim.of(record)
        claim_item = {
            "id": {"S": _claim_id(record)},
            "lifecycle": {"S": claim.lifecycle},
            "since": {"S": claim.since.isoformat()},
            # needed as long as a late event of its action can be taken in: until the action's global timeout
            "expires_at": item["expires_at"],
        }
        written = _conditional_put(self._table, item, *_record_condition(expected_seq))
        claimed = _conditional_put(self._table, claim_item, *_claim_condition(expected))
        puts: list[TransactWriteItemTypeDef] = [{"Put": written}, {"Put": claimed}]
        if record.token_known:
            # The token held for this record, in the same transaction (one call, as before): a second record of
            # it, under another instance or transition, is refused (see ClaimingRecordStore.write_claimed). This
            # record's own writes meet their own item (a retry, a commit over a seq, a takeover under its group
            # and hook): the condition holds.
            token_item = {
                "id": {"S": _token_id(record.token)},
                "lifecycle": {"S": record.id},
                # as long as its claim: a late message of the token can come until then
                "expires_at": item["expires_at"],
            }
            values = {":lifecycle": {"S": record.id}}
            condition = _TOKEN_CONDITION
            if displacing is not None:
                condition += " OR lifecycle = :displaced"
                values[":displaced"] = {"S": displacing}
            puts.append({"Put": _conditional_put(self._table, token_item, condition, values)})
        try:
            with transient_errors("writing a lifecycle record and its action's claim"):
                self._dynamodb().transact_write_items(TransactItems=puts)
        except ClientError as error:
            if error_code(error) != "TransactionCanceledException":
                raise
            # (a field of TransactionCanceledException botocore's generic error response does not declare)
            answer = cast(dict[str, Any], error.response)
            reasons: list[dict[str, Any]] = answer.get("CancellationReasons") or [{} for _ in puts]
            on_record, on_claim, *on_token = reasons
            if _same_item(on_record.get("Item"), item):
                return Claimed.WRITTEN  # botocore sent it again after it landed (see _put), with its claim
            if on_record.get("Code") == "ConditionalCheckFailed":
                return Claimed.RECORD_TAKEN
            if on_claim.get("Code") == "ConditionalCheckFailed":
                return Claimed.CLAIM_TAKEN
            if any(reason.get("Code") == "ConditionalCheckFailed" for reason in on_token):
                (held,) = on_token
                # the token item that failed the condition names its holder (ALL_OLD): no read for it on the
                # crossed path. Read only when an answer would not carry it
                holder = (held.get("Item") or {}).get("lifecycle", {}).get("S")
                return TokenTaken(holder if isinstance(holder, str) else self._token_holder(record.token))
            # another transaction on one of the items at that moment, or throttled: worth retrying
            raise TransientError(f"writing a lifecycle record and its action's claim: {error}") from error
        return Claimed.WRITTEN

    def _token_holder(self, token: str) -> str | None:
        with transient_errors("reading which lifecycle holds a token"):
            response = self._dynamodb().get_item(
                TableName=self._table, Key={"id": {"S": _token_id(token)}}, ConsistentRead=True
            )
        item = response.get("Item")
        return item["lifecycle"]["S"] if item else None

    def get(self, record_id: str) -> LifecycleRecord | None:
        with transient_errors("reading a lifecycle record"):
            response = self._dynamodb().get_item(
                TableName=self._table, Key={"id": {"S": record_id}}, ConsistentRead=True
            )
        item = response.get("Item")
        return _from_item(item) if item else None

    def get_many(self, record_ids: Collection[str]) -> dict[str, LifecycleRecord]:
        ids = list(dict.fromkeys(record_ids))  # (a key named twice is a ValidationException)
        if len(ids) > BATCH_GET_MAX:
            raise ValueError(f"{len(ids)} lifecycle records asked for at once: at most {BATCH_GET_MAX}")
        found: dict[str, LifecycleRecord] = {}
        pending: Any = {self._table: {"Keys": [{"id": {"S": i}} for i in ids], "ConsistentRead": True}}
        for request in range(BATCH_GET_REQUESTS):
            if not pending.get(self._table, {}).get("Keys"):
                return found
            if request:
                time.sleep(BATCH_GET_BACKOFF * 2 ** (request - 1))
            with transient_errors("reading lifecycle records"):
                response = self._dynamodb().batch_get_item(RequestItems=pending)
            for item in response.get("Responses", {}).get(self._table, []):
                record = _from_item(item)
                found[record.id] = record
            pending = response.get("UnprocessedKeys") or {}
        left = len(pending.get(self._table, {}).get("Keys", []))
        if left:
            raise TransientError(
                f"reading lifecycle records: {left} of {len(ids)} left unprocessed after {BATCH_GET_REQUESTS} requests"
            )
        return found

    def progress(self, key: str) -> int:
        with transient_errors("reading an event's intake progress"):
            response = self._dynamodb().get_item(
                TableName=self._table, Key={"id": {"S": _progress_id(key)}}, ConsistentRead=True
            )
        item = response.get("Item")
        return int(item["done"]["N"]) if item else 0

    def save_progress(self, key: str, done: int, at: datetime) -> None:
        item = {
            "id": {"S": _progress_id(key)},
            "done": {"N": str(done)},
            # kept as long as a retry of the event can come: a redrive from the dead-letter queue included
            "expires_at": {"N": str(int((at + self._ttl).timestamp()))},
        }
        try:
            with transient_errors("saving an event's intake progress"):
                self._dynamodb().put_item(
                    TableName=self._table,
                    Item=item,
                    ConditionExpression="attribute_not_exists(id) OR done < :done",
                    ExpressionAttributeValues={":done": item["done"]},
                )
        except ClientError as error:
            if error_code(error) != "ConditionalCheckFailedException":
                raise
            # another delivery of the event got as far or further (or botocore's retry of this write landed)

    def open_records(self, owner: str) -> Iterator[LifecycleRecord]:
        # The index is sparse (only open records carry open_owner) and projects every attribute, so one
        # query page after another returns whole records: calls grow with pages, not with records.
        paginator = self._dynamodb().get_paginator("query")
        pages = paginator.paginate(
            TableName=self._table,
            IndexName=OPEN_INDEX,
            KeyConditionExpression="open_owner = :owner",
            ExpressionAttributeValues={":owner": {"S": owner}},
        )
        with transient_errors("listing open lifecycle records"):
            for page in pages:
                yield from _readable(page.get("Items", []))

    def scan(self, owner: str) -> Iterator[LifecycleRecord]:
        """Every record of ``owner`` still in the table, finished ones too: a full scan, for operators'
        tools (``nodecycle status --all``), never for the functions."""
        pages = (
            self._dynamodb()
            .get_paginator("scan")
            .paginate(
                TableName=self._table,
                FilterExpression="#owner = :owner",
                ExpressionAttributeNames={"#owner": "owner"},
                ExpressionAttributeValues={":owner": {"S": owner}},
            )
        )
        with transient_errors("scanning lifecycle records"):
            for page in pages:
                yield from _readable(page.get("Items", []))

    def _put(self, record: LifecycleRecord, condition: str, values: dict[str, Any]) -> bool:
        item = self._to_item(record)
        try:
            with transient_errors("writing a lifecycle record"):
                self._dynamodb().put_item(**_conditional_put(self._table, item, condition, values))
        except ClientError as error:
            if error_code(error) == "ConditionalCheckFailedException":
                # botocore sends a request again when its answer was lost (a timeout, a 500 after the write);
                # a retry of a write that landed fails its own condition. That is this writer's success, not
                # a lost race: read as one, the engine would send no next message and the lifecycle would wait
                # for the sweeper, an intake would drop its first message.
                return _same_item(error.response.get("Item"), item)  # type: ignore[arg-type]
            raise
        return True

    def _to_item(self, record: LifecycleRecord) -> dict[str, Any]:
        data = record.model_dump(mode="json", exclude_none=True)
        # kept a TTL after it ends; an open record is kept at least that long after its next step is due (a
        # cleanup may look at its node for weeks, past the action's global timeout)
        end = record.finished_at or max(record.global_deadline, record.due_at)
        data["expires_at"] = int((end + self._ttl).timestamp())  # the table's TTL attribute
        if not record.finished:
            data["open_owner"] = record.owner
            data["due_epoch"] = int(record.due_at.timestamp())
        return {key: _serializer.serialize(_dynamo(value)) for key, value in data.items() if value != {}}


def _conditional_put(table: str, item: dict[str, Any], condition: str, values: dict[str, Any]) -> PutTypeDef:
    """A conditional PutItem's parameters (alone, or in a transaction)."""
    put: PutTypeDef = {
        "TableName": table,
        "Item": item,
        "ConditionExpression": condition,
        # the item that failed the condition, in the same answer: it may be this very write
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    if values:
        put["ExpressionAttributeValues"] = values
    return put


def _readable(items: list[dict[str, Any]]) -> Iterator[LifecycleRecord]:
    """The records of a page of items. One this release cannot read (written by a newer one before a
    rollback, or edited by hand) must not stop a listing of all the others (the sweep, an operator's
    ``nodecycle status --all``): it is named, and skipped."""
    for item in items:
        try:
            yield _from_item(item)
        except ValidationError as error:
            record_id = item.get("id", {}).get("S", "?")
            log.error("lifecycle record %s cannot be read, skipped: %s", record_id, error)


def _record_condition(expected_seq: int | None) -> tuple[str, dict[str, Any]]:
    if expected_seq is None:
        return "attribute_not_exists(id)", {}
    return "seq = :expected", {":expected": {"N": str(expected_seq)}}


def _claim_condition(expected: ActionClaim | None) -> tuple[str, dict[str, Any]]:
    if expected is None:
        return "attribute_not_exists(id)", {}
    values = {":lifecycle": {"S": expected.lifecycle}, ":since": {"S": expected.since.isoformat()}}
    return "lifecycle = :lifecycle AND since = :since", values


def _claim_id(action: ActionRef) -> str:
    """The claim's item: beside the records, under an id no record has (nor any record id's form)."""
    return f"claim#{action.instance_id}#{action.transition.short}#{action.hook}"


# A token's item: held by the record that wrote it first, or written again by that record's own writes
_TOKEN_CONDITION = "attribute_not_exists(id) OR lifecycle = :lifecycle"


def _token_id(token: str) -> str:
    """Which record holds a token (see write_claimed): beside the records, under an id no record has."""
    return f"token#{token}"


def _progress_id(key: str) -> str:
    """An event's intake progress (see IntakeBudget): beside the records, under an id no record has."""
    return f"intake-progress#{key}"


def _same_item(stored: dict[str, Any] | None, sent: dict[str, Any]) -> bool:
    """Whether the item DynamoDB returned is the one sent, value for value. Not the wire forms: DynamoDB keeps a
    number, not the string it was sent (leading and trailing zeroes trimmed, no exponent), so a float of a record's
    extra sent as "2.0" or "1E+20" comes back as "2" or "100000000000000000000"; read back, both are the same
    Decimal."""
    if stored is None or stored.keys() != sent.keys():
        return False
    return all(_deserializer.deserialize(stored[key]) == _deserializer.deserialize(sent[key]) for key in sent)


def _from_item(item: dict[str, Any]) -> LifecycleRecord:
    data = {key: _plain(_deserializer.deserialize(value)) for key, value in item.items()}
    return LifecycleRecord.model_validate(data, strict=False)


def _dynamo(value: Any) -> Any:
    """DynamoDB numbers are Decimals; it refuses floats."""
    if isinstance(value, float):
        return Decimal(str(value))
    if isinstance(value, list):
        return [_dynamo(item) for item in value]
    if isinstance(value, dict):
        return {key: _dynamo(item) for key, item in value.items()}
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value
