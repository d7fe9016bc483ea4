"""DynamoDB's Time to Live: the deletions of expired items, which moto never makes, made when a test says so.

DynamoDB compares an item's TTL attribute (a top-level Number: epoch seconds) with its clock and deletes the item
once it has passed, "on a best-effort basis", "typically within two days of expiration"; until then "items that
have expired and not been deleted will still show up in reads, queries, and scans", and the deletion reaches the
table's indexes "in the same eventually consistent way as a standard delete operation" (DynamoDB API reference,
UpdateTimeToLive; developer guide, "Working with expired items"). An item whose TTL attribute is missing or not
a Number is never deleted.

moto keeps a table's TTL specification and never deletes an item for it: what DynamoDB does in the first hours
after an expiry (the item still there, to reads and to conditional writes alike), but not what it does after: a
product whose correctness needs an item the table's TTL may have taken (a claim, an intake progress, a line of
waiters) was never shown without it, unless a test deleted it by hand, whatever the table's TTL attribute says.

:func:`expire` makes the deletions DynamoDB may have made by a given time: every item of a table whose TTL is
enabled whose TTL attribute is a Number at or before that time, deleted as a DeleteItem deletes it (so a lagging
index, ``dynamodb_index_lag``, sees it late too). It is a test's to call (``AwsControl.expire_ttl``), at the time
it chooses: DynamoDB may make any of them at any time after the expiry, so a test shows the product correct with
the item there (moto's default) and gone.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import Item

from nodecycle_sandbox.aws.dynamodb_transactions import LOCK


def expire(backend: DynamoDBBackend, at: float) -> list[str]:
    """Delete, in every table of ``backend`` whose TTL is enabled, the items expired at ``at`` (epoch seconds);
    the ``table/key`` of each (its hash key, and its range key after a ``/`` if any), in the tables' order."""
    with LOCK:  # (one operation among the others: the tables are not walked while requests write to them)
        return _expire(backend, at)


def _expire(backend: DynamoDBBackend, at: float) -> list[str]:
    deleted: list[str] = []
    for table in list(backend.tables.values()):
        ttl: dict[str, Any] = getattr(table, "ttl", None) or {}
        attribute = ttl.get("AttributeName")
        if ttl.get("TimeToLiveStatus") != "ENABLED" or not attribute:
            continue
        for item in [item for item in table.all_items() if _expired(item, str(attribute), at)]:
            key = {table.hash_key_attr: item.hash_key.to_json()}
            if table.range_key_attr and item.range_key is not None:
                key[table.range_key_attr] = item.range_key.to_json()
            backend.delete_item(table.name, key)
            named = "/".join(str(part.value) for part in (item.hash_key, item.range_key) if part is not None)
            deleted.append(f"{table.name}/{named}")
    return deleted


def _expired(item: Item, attribute: str, at: float) -> bool:
    value = item.attrs.get(attribute)
    if value is None or value.type != "N":
        return False  # (DynamoDB deletes only by a top-level Number)
    try:
        return Decimal(str(value.value)) <= Decimal(repr(at))
    except InvalidOperation:
        return False
