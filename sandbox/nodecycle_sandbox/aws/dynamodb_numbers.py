"""DynamoDB numbers stored as DynamoDB stores them: without leading and trailing zeroes.

DynamoDB takes a number as a string and keeps the number, not the string: "Leading and trailing zeroes are
trimmed" (DynamoDB developer guide, "Supported data types", Number). An item written with ``{"N": "1.50"}``,
``{"N": "007"}`` or ``{"N": "2.0"}`` is read back as ``"1.5"``, ``"7"`` and ``"2"``, in a GetItem, a Query, and the
old item a failed conditional write returns (``ReturnValuesOnConditionCheckFailure``, a transaction's
``CancellationReasons``). moto kept the string as it was sent, so a writer that tells its own write from another's
by comparing the item a failed condition returns with the item it sent (a write sent again by botocore after its
answer was lost finds itself) always found them equal in the sandbox, whatever form its numbers took; on AWS a
number written in another form than DynamoDB's reads as someone else's item.

Here every number moto takes in (an item's attribute, in maps, lists and number sets; an expression's value) is
kept in DynamoDB's form: the plain digits of its value, no exponent, no leading zero before the integer part, no
trailing zero after the point, ``0`` for any zero. A string that is no number is left to moto's own checks.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from moto.dynamodb.models.dynamo_type import DynamoType

_MARKER = "_nodecycle_sandbox_numbers"


def canonical(number: str) -> str:
    """``number`` as DynamoDB gives it back; as it is when it is no number."""
    try:
        value = Decimal(number)
    except (InvalidOperation, TypeError, ValueError):
        return number
    if not value.is_finite():
        return number  # (DynamoDB refuses these; moto says so)
    if value.is_zero():
        return "0"
    plain = format(value, "f")  # every digit of the value, without an exponent and without rounding
    if "." in plain:
        plain = plain.rstrip("0").rstrip(".")
    return plain


def install() -> None:
    """Idempotent: a second call changes nothing."""
    if getattr(DynamoType, _MARKER, False):
        return
    original = DynamoType.__init__

    def init(self: DynamoType, type_as_dict: Any) -> None:
        original(self, type_as_dict)
        if self.type == "N" and isinstance(self.value, str):
            self.value = canonical(self.value)
        elif self.type == "NS" and isinstance(self.value, list):
            self.value = [canonical(member) if isinstance(member, str) else member for member in self.value]

    DynamoType.__init__ = init  # type: ignore[method-assign]
    setattr(DynamoType, _MARKER, True)
