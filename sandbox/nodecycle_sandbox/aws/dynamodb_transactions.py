"""DynamoDB writes decided one at a time, and transactions that keep what they did not touch.

moto's TransactWriteItems deep-copies every table it names before it starts, and on a cancelled
transaction puts those copies back in place of the tables. In the sandbox's threaded server that is two
defects DynamoDB does not have: the copy iterates the table while other requests' threads write to it (a
500, "dictionary changed size during iteration", in a 300-node refresh), and a cancelled transaction
undoes every write another request made to *other* items of the table meanwhile. It also costs a copy of
the whole table per transaction (every hook lifecycle is written in one: its record and its action's claim).

Every write, read and transaction of the process's DynamoDB backends now runs under one lock, as DynamoDB
serializes the operations on an item (a transaction is isolated from the reads and writes of its items), and a
transaction made of Put, Delete and ConditionCheck operations (they replace or remove items, never change
one in place) keeps a copy of its tables' item maps only, which is all its undo needs; one with an Update
(which changes an item in place) keeps moto's deep copy.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from functools import wraps
from typing import Any

from moto.dynamodb import models
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.table import Table

from nodecycle_sandbox.aws.one_at_a_time import one_at_a_time

LOCK = _LOCK = threading.RLock()  # (public: the index lag's wrappers take it too, installed in either order)
_OPERATIONS = (
    "get_item",
    "put_item",
    "update_item",
    "delete_item",
    "query",
    "scan",
)
_REPLACING = frozenset({"Put", "Delete", "ConditionCheck"})


class _Undo:
    """What moto's transaction reads as the ``copy`` module: its deep copy of a table, for a transaction
    that only replaces or removes items, is the table with its own copy of the item map."""

    def __init__(self, items_only: bool) -> None:
        self._items_only = items_only

    def deepcopy(self, value: Any, memo: dict[int, Any] | None = None) -> Any:
        if not (self._items_only and isinstance(value, Table)):
            return copy.deepcopy(value, memo)
        kept = copy.copy(value)
        kept.items = copy.copy(value.items)
        if value.has_range_key:  # {hash: {range: item}}: the inner maps are changed too
            for hash_key, by_range in value.items.items():
                kept.items[hash_key] = dict(by_range)
        return kept

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)


def _transaction(transact: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(transact)
    def transact_write_items(self: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> Any:
        items_only = all(set(item) <= _REPLACING for item in transact_items)
        with _LOCK:
            models.copy = _Undo(items_only)  # type: ignore[assignment]
            try:
                return transact(self, transact_items)
            finally:
                models.copy = copy

    return transact_write_items


def install() -> None:
    if getattr(DynamoDBBackend, "_nodecycle_transactions", False):
        return
    one_at_a_time(DynamoDBBackend, _OPERATIONS, _LOCK)
    DynamoDBBackend.transact_write_items = _transaction(DynamoDBBackend.transact_write_items)  # type: ignore[method-assign]
    DynamoDBBackend._nodecycle_transactions = True  # type: ignore[attr-defined]
