"""A DynamoDB global secondary index that lags its table, and eventually consistent reads that lag with it.

DynamoDB copies each write to a table's global secondary indexes asynchronously: a Query (or Scan) of a GSI is
always eventually consistent (``ConsistentRead`` is refused on one, as moto does too), usually behind by under a
second, by much longer while the index is throttled or backfilling. Meanwhile an item just written may be missing
from the index, an item whose index key was just removed (a sparse index: a lifecycle record closed, its
``open_owner`` gone) may still be listed, and a listed item may carry an older version of its attributes. moto
answers an index from the table's latest state, so no test could show a reader of an index acting on such a
listing.

The table's own reads are eventually consistent too unless asked otherwise: a GetItem, Query or Scan without
``ConsistentRead`` "might not reflect the results of a recently completed write operation" (DynamoDB developer
guide, read consistency), as it may read a copy of the item the write has not reached yet; moto answered them
all from the latest state, so a reader that left ``ConsistentRead`` out (a claim, a record's seq, a completion
read back) could not be caught acting on an older version.

Here each write of an item to a table the lag is on for is copied to the table's indexes, and to the copies
an eventually consistent read may read, later: a Query or Scan naming a GSI, and a GetItem, Query or Scan of the
table (or of a local index) without ``ConsistentRead``, sees each such item as it was before the writes not yet
copied (absent, if it was); so does a BatchGetItem of a table it does not ask ``ConsistentRead`` of (asked per
table; moto ignored it and read each key's latest item); a consistent read, a transaction's read
(TransactGetItems: serializable), and the reads a write makes of its own item (a condition, ReturnValues) the
latest state. The copies of one item's writes arrive in the order of the writes (a later one never overtakes an
earlier one). Two ways to turn it on:

- the fault kind ``dynamodb-index-lag`` (armed like the other AWS faults: ``AwsControl.arm_faults``,
  ``Sandbox.arm_faults``): ``target`` a glob over the table's name, ``value`` the seconds a write takes to reach
  the indexes, ``probability`` the share of the writes that lag (the others arrive at once, unless an earlier
  write of the same item still lags); every caller's writes (the index lags for everyone, not per caller).
  Disarming catches the indexes up at once;
- :meth:`IndexLag.held` (in-process, as the kube sandbox's ``lagging_watch_cache``): the indexes of the matching
  tables get nothing written meanwhile until the block ends, when they catch up.

Each write's before and after, and each lagged read, are taken under the DynamoDB lock (``dynamodb_transactions``),
as one operation; a cancelled transaction takes back what its writes queued for the indexes.
"""

from __future__ import annotations

import contextlib
import copy
import fnmatch
import inspect
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import wraps
from typing import Any

from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType, Item
from moto.dynamodb.models.table import Table
from moto.dynamodb.responses import DynamoHandler

from nodecycle_sandbox.aws.dynamodb_transactions import LOCK
from nodecycle_sandbox.faults import DYNAMODB_KINDS, Fault, Injector

# (account, region, table, hash key, range key)
_Key = tuple[str, str, str, DynamoType, DynamoType | None]


@dataclass
class _Lagging:
    """One item whose latest writes have not reached the indexes yet."""

    shown: Item | None  # what the indexes hold of it (None: nothing)
    # (when each version written since arrives, and the version, in the order written)
    queue: list[tuple[float, Item | None]] = field(default_factory=list)

    def caught_up(self, now: float) -> bool:
        """Move what has arrived by ``now`` into ``shown``; whether nothing is left to arrive."""
        while self.queue and self.queue[0][0] <= now:
            _, self.shown = self.queue.pop(0)
        return not self.queue


class IndexLag(Injector):
    """The lag of the process's DynamoDB indexes: the writes on their way to them, and what turns the lag on."""

    def __init__(self) -> None:
        super().__init__("dynamodb-index")
        self._pending: dict[_Key, _Lagging] = {}
        self._holds: list[str] = []  # table name globs held behind (see held)
        self._state = threading.Lock()

    def arm(self, faults: list[Fault] | tuple[Fault, ...], seed: int) -> None:
        """Start a plan: only its ``dynamodb-index-lag`` rules count here; what lagged before has arrived."""
        super().arm([f for f in faults if f.kind in DYNAMODB_KINDS], seed)
        self.catch_up()

    def disarm(self) -> None:
        super().disarm()
        self.catch_up()

    def catch_up(self) -> None:
        """Every write not held reaches the indexes now."""
        with self._state:
            held = self._holds
            self._pending = {k: v for k, v in self._pending.items() if _matches(k[2], held)}

    @contextlib.contextmanager
    def held(self, table: str = "*") -> Iterator[None]:
        """Hold the indexes of the tables ``table`` names (a glob) behind meanwhile: they see the items as they
        are now, whatever is written until the block ends; then they catch up."""
        with self._state:
            self._holds.append(table)
        try:
            yield
        finally:
            with self._state:
                self._holds.remove(table)
                now = time.monotonic()
                for key, lagging in self._pending.items():
                    if not _matches(key[2], self._holds):
                        lagging.queue = [(min(at, now), version) for at, version in lagging.queue]

    # -- what the backend's wrappers ask --------------------------------------------------------------------

    @property
    def idle(self) -> bool:
        """Nothing lags, nor may: the wrappers go straight to moto (every DynamoDB call of every test passes)."""
        return not (self._pending or self._holds or self._faults)

    def may_lag(self, key: _Key) -> bool:
        """Whether a write of ``key`` is to be followed (its before kept): lagging already, or the lag is on."""
        with self._state:
            if key in self._pending or _matches(key[2], self._holds):
                return True
        return any(f.kind in DYNAMODB_KINDS and fnmatch.fnmatchcase(key[2], f.target) for f in self._faults)

    def written(self, key: _Key, before: Item | None, after: Item | None) -> None:
        """A write of ``key`` landed: when its version reaches the indexes."""
        now = time.monotonic()
        with self._state:
            held = _matches(key[2], self._holds)
        fault = None if held else self.draw(DYNAMODB_KINDS, key[2], f"{key[2]} {_described(key)}")
        delay = math.inf if held else fault.value if fault is not None else 0.0
        with self._state:
            lagging = self._pending.get(key)
            if lagging is None:
                if delay <= 0:
                    return  # (nothing on its way: this one arrives at once)
                lagging = self._pending[key] = _Lagging(shown=before)
            arrives = max(now + delay, lagging.queue[-1][0] if lagging.queue else now)
            lagging.queue.append((arrives, after))

    def view(self, account: str, region: str, table: Table) -> Any:
        """The items of ``table`` as its indexes hold them now (the shape of ``Table.items``), or None when
        they hold the latest state."""
        now = time.monotonic()
        with self._state:
            for key in [k for k, v in self._pending.items() if v.caught_up(now)]:
                del self._pending[key]
            lagging = {k: v.shown for k, v in self._pending.items() if k[:3] == (account, region, table.name)}
        if not lagging:
            return None
        items: Any = copy.copy(table.items)  # ({hash: item}, or {hash: {range: item}})
        for (_, _, _, hash_key, range_key), shown in lagging.items():
            if range_key is None:
                if shown is None:
                    items.pop(hash_key, None)
                else:
                    items[hash_key] = shown
                continue
            by_range = dict(items.get(hash_key, {}))
            if shown is None:
                by_range.pop(range_key, None)
            else:
                by_range[range_key] = shown
            items[hash_key] = by_range
        return items

    def checkpoint(self) -> dict[_Key, _Lagging]:
        with self._state:
            return {k: _Lagging(v.shown, list(v.queue)) for k, v in self._pending.items()}

    def restore(self, pending: dict[_Key, _Lagging]) -> None:
        """A cancelled transaction: what its writes queued never reaches the indexes."""
        with self._state:
            self._pending = pending


def _matches(table: str, globs: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(table, glob) for glob in globs)


def _described(key: _Key) -> str:
    return "/".join(str(part.value) for part in key[3:] if part is not None)


# The one index lag of this process (moto serves every account and region of the process).
LAG = IndexLag()


def _key(backend: DynamoDBBackend, table: Table, hash_key: DynamoType, range_key: DynamoType | None) -> _Key:
    return (backend.account_id, backend.region_name, table.name, hash_key, range_key)


def _frozen(item: Item | None) -> Item | None:
    """A version of an item as it is now (an UpdateItem changes the stored one in place)."""
    return copy.deepcopy(item)


def _followed(
    operation: Callable[..., Any],
    key_of: Callable[[DynamoDBBackend, Table, inspect.BoundArguments], tuple[Any, Any]],
) -> Callable[..., Any]:
    """``operation`` (a write of one item), its item's before and after told to ``LAG`` when it lags."""
    signature = inspect.signature(operation)

    @wraps(operation)
    def write(self: DynamoDBBackend, *args: Any, **kwargs: Any) -> Any:
        if LAG.idle:
            return operation(self, *args, **kwargs)
        bound = signature.bind(self, *args, **kwargs)
        try:
            table = self.get_table(bound.arguments["table_name"])
            key = _key(self, table, *key_of(self, table, bound))
        except Exception:  # (a table or key DynamoDB refuses: the write itself says so)
            return operation(self, *args, **kwargs)
        with LOCK:
            if not LAG.may_lag(key):
                return operation(self, *args, **kwargs)
            before = _frozen(table.get_item(key[3], key[4]))
            result = operation(self, *args, **kwargs)
            LAG.written(key, before, _frozen(table.get_item(key[3], key[4])))
            return result

    return write


def _put_key(backend: DynamoDBBackend, table: Table, bound: inspect.BoundArguments) -> tuple[Any, Any]:
    attrs = bound.arguments["item_attrs"]
    range_key = DynamoType(attrs[table.range_key_attr]) if table.range_key_attr else None
    return DynamoType(attrs[table.hash_key_attr]), range_key


def _keyed(backend: DynamoDBBackend, table: Table, bound: inspect.BoundArguments) -> tuple[Any, Any]:
    return backend.get_keys_value(table, bound.arguments["key"])


def _as_lagged(backend: DynamoDBBackend, table: Table, operation: Callable[[], Any]) -> Any:
    """``operation`` (a read of ``table``) made on the items as the lagging copies hold them (under LOCK)."""
    items = LAG.view(backend.account_id, backend.region_name, table)
    if items is None:
        return operation()
    latest, table.items = table.items, items
    try:
        return operation()
    finally:
        table.items = latest


def _lagged_read(operation: Callable[..., Any]) -> Callable[..., Any]:
    """A Query or Scan that, naming a global secondary index or not asking for a consistent read, reads the
    items as the lagging copies hold them."""
    signature = inspect.signature(operation)

    @wraps(operation)
    def read(self: DynamoDBBackend, *args: Any, **kwargs: Any) -> Any:
        if LAG.idle:
            return operation(self, *args, **kwargs)
        bound = signature.bind(self, *args, **kwargs)
        index = bound.arguments.get("index_name")
        with LOCK:
            table = self.get_table(bound.arguments["table_name"])
            # (a local index reads the table: consistently if asked, as the table itself)
            if index not in {gsi.name for gsi in table.global_indexes} and bound.arguments.get(
                "consistent_read"
            ):
                return operation(self, *args, **kwargs)
            return _as_lagged(self, table, lambda: operation(self, *args, **kwargs))

    return read


# Set while moto serves a GetItem request that did not ask for a consistent read (the backend's get_item is not
# told ConsistentRead, and is also what writes and transactions read their own items with, consistently); and, while
# it serves a BatchGetItem, the tables it reads without one (``tables``: BatchGetItem asks it per table).
_EVENTUAL = threading.local()


def _eventual_get_request(serve: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(serve)
    def get_item(self: DynamoHandler) -> Any:
        if LAG.idle or self.body.get("ConsistentRead"):
            return serve(self)
        _EVENTUAL.on = True
        try:
            return serve(self)
        finally:
            _EVENTUAL.on = False

    return get_item


def _eventual_batch_request(serve: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(serve)
    def batch_get_item(self: DynamoHandler) -> Any:
        asked = self.body.get("RequestItems") or {}
        eventual = frozenset(name for name, request in asked.items() if not request.get("ConsistentRead"))
        if LAG.idle or not eventual:
            return serve(self)
        _EVENTUAL.tables = eventual
        try:
            return serve(self)
        finally:
            _EVENTUAL.tables = frozenset()

    return batch_get_item


def _lagged_get(operation: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(operation)
    def get_item(self: DynamoDBBackend, table_name: str, *args: Any, **kwargs: Any) -> Any:
        eventual = getattr(_EVENTUAL, "on", False) or table_name in getattr(_EVENTUAL, "tables", ())
        if LAG.idle or not eventual:
            return operation(self, table_name, *args, **kwargs)
        with LOCK:
            table = self.get_table(table_name)
            return _as_lagged(self, table, lambda: operation(self, table_name, *args, **kwargs))

    return get_item


def _transaction(transact: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(transact)
    def transact_write_items(self: DynamoDBBackend, *args: Any, **kwargs: Any) -> Any:
        with LOCK:
            kept = LAG.checkpoint()
            try:
                return transact(self, *args, **kwargs)
            except Exception:
                LAG.restore(kept)
                raise

    return transact_write_items


def install() -> None:
    """Idempotent."""
    if getattr(DynamoDBBackend, "_nodecycle_index_lag", False):
        return
    backend: Any = DynamoDBBackend
    backend.put_item = _followed(DynamoDBBackend.put_item, _put_key)
    backend.update_item = _followed(DynamoDBBackend.update_item, _keyed)
    backend.delete_item = _followed(DynamoDBBackend.delete_item, _keyed)
    backend.get_item = _lagged_get(DynamoDBBackend.get_item)
    handler: Any = DynamoHandler
    handler.get_item = _eventual_get_request(DynamoHandler.get_item)
    handler.batch_get_item = _eventual_batch_request(DynamoHandler.batch_get_item)
    backend.query = _lagged_read(DynamoDBBackend.query)
    backend.scan = _lagged_read(DynamoDBBackend.scan)
    backend.transact_write_items = _transaction(DynamoDBBackend.transact_write_items)
    backend._nodecycle_index_lag = True
