"""DynamoDB items answered as moto stores them, without walking the service model per attribute.

moto keeps an item as DynamoDB's wire form ({"S": "..."}, {"M": {...}}, ...) and serializes each answer through
botocore's shapes, one attribute picker per member of every AttributeValue: a GetItem of one lifecycle record
took 5.7 ms of CPU (95% of it that walk), a fifth of the AWS process's CPU in a 300-node refresh (py-spy). An
AttributeValue already in wire form, of the kinds whose serialization leaves them unchanged (strings, numbers
as strings, their sets, booleans, null, and maps and lists of those), is written as it is; anything else
(binary values, which the walk encodes in base64) goes the walk. tests/sandbox/aws/test_dynamodb_items.py
compares both on the same answers.
"""

from __future__ import annotations

from typing import Any

from moto.core.model import StructureShape
from moto.core.serialize import BaseJSONSerializer

_STRINGS = frozenset({"S", "N"})
_STRING_SETS = frozenset({"SS", "NS"})
_FLAGS = frozenset({"NULL", "BOOL"})


def in_wire_form(value: Any) -> bool:
    """Whether the walk would write ``value`` back unchanged (one kind, of the kinds above, all the way down)."""
    if not isinstance(value, dict) or len(value) != 1:
        return False
    ((kind, inner),) = value.items()
    if kind in _STRINGS:
        return isinstance(inner, str)
    if kind in _STRING_SETS:
        return isinstance(inner, list) and all(isinstance(member, str) for member in inner)
    if kind in _FLAGS:
        return isinstance(inner, bool)
    if kind == "M":
        return isinstance(inner, dict) and all(in_wire_form(member) for member in inner.values())
    if kind == "L":
        return isinstance(inner, list) and all(in_wire_form(member) for member in inner)
    return False


def install() -> None:
    walk = BaseJSONSerializer._serialize_type_structure
    if getattr(walk, "_nodecycle_wire_form", False):
        return

    def serialize_structure(self: Any, serialized: Any, value: Any, shape: StructureShape, key: str) -> None:
        if key and shape.name == "AttributeValue" and in_wire_form(value):
            self._default_serialize(serialized, value, shape, key)
            return
        walk(self, serialized, value, shape, key)

    serialize_structure._nodecycle_wire_form = True  # type: ignore[attr-defined]
    serialize_structure.__wrapped__ = walk  # type: ignore[attr-defined]
    BaseJSONSerializer._serialize_type_structure = serialize_structure  # type: ignore[method-assign]
