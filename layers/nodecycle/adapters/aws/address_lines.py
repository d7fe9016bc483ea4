"""The lines of launches waiting for a pool address (:mod:`nodecycle.domain.eip.line`) on DynamoDB: one item
per owner and pool beside the lifecycle records, written only over the version read (GetItem, PutItem: what
the EIP function may do on the table already)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from nodecycle.adapters.aws.clients import LazyClient, error_code, transient_errors
from nodecycle.domain.eip.line import Held, Line, Refused, Waiter
from nodecycle.domain.eip.locked import Lock, Locks
from nodecycle.domain.eip.wake import Offer

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import PutItemInputTypeDef

# kept this long after its last waiter's wait ends: the table's TTL deletes it then (read as empty, version 0)
KEPT = timedelta(days=1)


class DynamoAddressLines:
    def __init__(self, table: str, dynamodb: DynamoDBClient | None = None) -> None:
        self._table = table
        self._dynamodb: LazyClient[DynamoDBClient] = LazyClient("dynamodb", dynamodb)

    def read(self, key: str) -> Line:
        with transient_errors("reading the line of launches waiting for a pool address"):
            response = self._dynamodb().get_item(
                TableName=self._table, Key={"id": {"S": _line_id(key)}}, ConsistentRead=True
            )
        item = response.get("Item")
        if not item:
            return Line()
        waiters = tuple(_waiter(entry["M"]) for entry in item.get("waiters", {}).get("L", []))
        return Line(waiters=waiters, version=int(item["version"]["N"]))

    def write(self, key: str, waiters: Sequence[Waiter], expected_version: int) -> bool:
        item: dict[str, Any] = {
            "id": {"S": _line_id(key)},
            "version": {"N": str(expected_version + 1)},
            "waiters": {"L": [{"M": _entry(waiter)} for waiter in waiters]},
        }
        if waiters:  # (an empty line, a few bytes, is kept: its version goes on)
            ends = max(waiter.until for waiter in waiters) + KEPT
            item["expires_at"] = {"N": str(int(ends.timestamp()))}
        return self._put_over(
            item,
            expected_version,
            "attribute_not_exists(id)",
            "writing the line of launches waiting for a pool address",
        )

    def taking(self, run: str, allocation_id: str, instead_of: str | None) -> str:
        item: dict[str, Any] = {
            "id": {"S": _taking_id(run)},
            "allocation": {"S": allocation_id},
            "expires_at": {"N": str(int((datetime.now(UTC) + KEPT).timestamp()))},
        }
        put: PutItemInputTypeDef = {
            "TableName": self._table,
            "Item": item,
            "ConditionExpression": "attribute_not_exists(id)",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if instead_of is not None:
            put["ConditionExpression"] = "attribute_not_exists(id) OR allocation = :refused"
            put["ExpressionAttributeValues"] = {":refused": {"S": instead_of}}
        try:
            with transient_errors("writing the address a launch takes"):
                self._dynamodb().put_item(**put)
        except ClientError as error:
            if error_code(error) == "ConditionalCheckFailedException":
                # (this very write, sent again by botocore after its answer was lost, finds itself: the same id)
                written: dict[str, Any] = dict(error.response.get("Item") or {})  # type: ignore[call-overload]
                return str(written.get("allocation", {}).get("S") or allocation_id)
            raise
        return allocation_id

    def hold(self, owner: str, instance_id: str, held: Held) -> None:
        self._put_kept(
            _held_id(owner, instance_id),
            _fields(held, _HELD),
            held.at,
            "keeping the pool address a launch left its instance holding",
        )

    def held(self, owner: str, instance_id: str) -> Held | None:
        found = self._get_kept(
            _held_id(owner, instance_id), "reading the pool address an instance's launch left it holding"
        )
        return None if found is None else Held(**_attributes(found[0], _HELD), at=found[1])

    def offer(self, key: str, lifecycle: str, offer: Offer) -> None:
        self._put_kept(
            _offer_id(key, lifecycle),
            _fields(offer, _OFFER),
            offer.at,
            "offering an address given back to the launch woken for it",
        )

    def offered(self, key: str, lifecycle: str) -> Offer | None:
        found = self._get_kept(
            _offer_id(key, lifecycle), "reading the address offered to a launch woken for it"
        )
        return None if found is None else Offer(**_attributes(found[0], _OFFER), at=found[1])

    def refusals(self, key: str) -> Refused:
        with transient_errors("reading the addresses EC2 refused to the launches of a line"):
            response = self._dynamodb().get_item(
                TableName=self._table, Key={"id": {"S": _refusals_id(key)}}, ConsistentRead=True
            )
        item = response.get("Item") or {}
        by = {
            (allocation_id, instance_id): datetime.fromisoformat(at["S"])
            for allocation_id, instances in item.get("refused", {}).get("M", {}).items()
            # (an item of the first writers, one time an address, is read as none: advice, it is written over)
            for instance_id, at in instances.get("M", {}).items()
        }
        return Refused(by=by, version=int(item.get("version", {}).get("N", 0)))

    def keep_refusals(
        self, key: str, refused: Mapping[tuple[str, str], datetime], expected_version: int
    ) -> bool:
        addresses: dict[str, dict[str, Any]] = {}
        for (allocation_id, instance_id), at in refused.items():
            addresses.setdefault(allocation_id, {})[instance_id] = {"S": at.isoformat()}
        item: dict[str, Any] = {
            "id": {"S": _refusals_id(key)},
            "version": {"N": str(expected_version + 1)},
            "refused": {"M": {allocation_id: {"M": by} for allocation_id, by in addresses.items()}},
        }
        if refused:
            item["expires_at"] = {"N": str(int((max(refused.values()) + KEPT).timestamp()))}
        # (an item without a version: none yet, or one of the first writers, one time an address: written over)
        return self._put_over(
            item,
            expected_version,
            "attribute_not_exists(version)",
            "telling the launches of a line the addresses EC2 refused",
        )

    def locks(self, owner: str) -> Locks:
        with transient_errors("reading the addresses AWS locked"):
            response = self._dynamodb().get_item(
                TableName=self._table, Key={"id": {"S": _locked_id(owner)}}, ConsistentRead=True
            )
        item = response.get("Item") or {}
        by = {
            allocation_id: Lock(
                since=datetime.fromisoformat(lock["M"]["since"]["S"]),
                tries=int(lock["M"]["tries"]["N"]),
                next_try=datetime.fromisoformat(lock["M"]["next_try"]["S"]),
                refused=lock["M"].get("refused", {}).get("BOOL", False),
                association=lock["M"].get("association", {}).get("S"),
            )
            for allocation_id, lock in item.get("locked", {}).get("M", {}).items()
        }
        return Locks(by=by, version=int(item.get("version", {}).get("N", 0)))

    def keep_locks(self, owner: str, locks: Mapping[str, Lock], expected_version: int) -> bool:
        item: dict[str, Any] = {
            "id": {"S": _locked_id(owner)},
            "version": {"N": str(expected_version + 1)},
            "locked": {
                "M": {
                    allocation_id: {
                        "M": {
                            "since": {"S": lock.since.isoformat()},
                            "tries": {"N": str(lock.tries)},
                            "next_try": {"S": lock.next_try.isoformat()},
                            # (absent for a lock: the items written before refusals were remembered read alike)
                            **({"refused": {"BOOL": True}} if lock.refused else {}),
                            # (a disassociation refused: that association's; absent for a release's)
                            **({"association": {"S": lock.association}} if lock.association else {}),
                        }
                    }
                    for allocation_id, lock in locks.items()
                }
            },
        }
        if locks:  # (kept while its addresses are tried; the domain forgets a lock a day past its next try)
            ends = max(lock.next_try for lock in locks.values()) + KEPT
            item["expires_at"] = {"N": str(int(ends.timestamp()))}
        return self._put_over(
            item, expected_version, "attribute_not_exists(id)", "remembering the addresses AWS locked"
        )

    def _put_over(self, item: dict[str, Any], expected_version: int, first: str, doing: str) -> bool:
        """Write ``item`` only over ``expected_version`` (0: only where ``first`` holds); False when another
        wrote first."""
        put: PutItemInputTypeDef = {
            "TableName": self._table,
            "Item": item,
            "ConditionExpression": first,
            # the item that failed the condition: it may be this very write, sent again by botocore after its
            # answer was lost
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if expected_version:
            put["ConditionExpression"] = "version = :expected"
            put["ExpressionAttributeValues"] = {":expected": {"N": str(expected_version)}}
        try:
            with transient_errors(doing):
                self._dynamodb().put_item(**put)
        except ClientError as error:
            if error_code(error) == "ConditionalCheckFailedException":
                return error.response.get("Item") == item
            raise
        return True

    def _put_kept(self, item_id: str, fields: dict[str, str], at: datetime, doing: str) -> None:
        """Write the item (over any earlier), of string ``fields`` and its time ``at``, kept until ``at`` + KEPT
        (its TTL's expiry: see _get_kept)."""
        item: dict[str, Any] = {
            "id": {"S": item_id},
            **{name: {"S": value} for name, value in fields.items()},
            "at": {"S": at.isoformat()},
            "expires_at": {"N": str(int((at + KEPT).timestamp()))},
        }
        with transient_errors(doing):
            self._dynamodb().put_item(TableName=self._table, Item=item)

    def _get_kept(self, item_id: str, doing: str) -> tuple[dict[str, str], datetime] | None:
        """The item's string fields and its time, read consistently; None when there is none, or once it is KEPT
        old (at + KEPT, the moment its TTL expires it, and on: the table deletes an expired item late, within
        days)."""
        with transient_errors(doing):
            response = self._dynamodb().get_item(
                TableName=self._table, Key={"id": {"S": item_id}}, ConsistentRead=True
            )
        item = response.get("Item")
        if not item:
            return None
        at = datetime.fromisoformat(item["at"]["S"])
        if _now() >= at + KEPT:
            return None
        return {name: value["S"] for name, value in item.items() if "S" in value}, at


# The items' attributes (strings) of the held and offered addresses' fields, besides their time ``at``
_HELD = {
    "allocation": "allocation_id",
    "association": "association_id",
    "public_ip": "public_ip",
    "pool": "pool",
}
_OFFER = {"allocation": "allocation_id", "public_ip": "public_ip", "pool": "pool", "ended": "ended"}


def _fields(kept: Held | Offer, names: dict[str, str]) -> dict[str, str]:
    return {attribute: getattr(kept, field) for attribute, field in names.items()}


def _attributes(fields: dict[str, str], names: dict[str, str]) -> dict[str, str]:
    return {field: fields[attribute] for attribute, field in names.items()}


def _now() -> datetime:
    return datetime.now(UTC)


def _offer_id(key: str, lifecycle: str) -> str:
    """The item of the address offered to a waiter of a line, woken for it: beside the records and the lines."""
    return f"eip-offer#{key}#{lifecycle}"


def _refusals_id(key: str) -> str:
    """The item of the addresses EC2 refused lately to the launches of a line: beside the records and the lines."""
    return f"eip-refused#{key}"


def _locked_id(owner: str) -> str:
    """The item of the owner's addresses AWS locked (ReleaseAddress refused): beside the records and the lines."""
    return f"eip-locked#{owner}"


def _held_id(owner: str, instance_id: str) -> str:
    """The item of the pool address an instance's launch left it holding: beside the records and the lines."""
    return f"eip-held#{owner}#{instance_id}"


def _taking_id(run: str) -> str:
    """The item of the address one message's deliveries take: beside the records and the lines."""
    return f"eip-take#{run}"


def _line_id(key: str) -> str:
    """The line's item: beside the records, under an id no record has (nor any record id's form)."""
    return f"eip-line#{key}"


def _entry(waiter: Waiter) -> dict[str, Any]:
    return {
        "lifecycle": {"S": waiter.lifecycle},
        "instance": {"S": waiter.instance_id},
        "since": {"S": waiter.since.isoformat()},
        "until": {"S": waiter.until.isoformat()},
    }


def _waiter(entry: dict[str, Any]) -> Waiter:
    return Waiter(
        since=datetime.fromisoformat(entry["since"]["S"]),
        lifecycle=entry["lifecycle"]["S"],
        instance_id=entry["instance"]["S"],
        until=datetime.fromisoformat(entry["until"]["S"]),
    )
