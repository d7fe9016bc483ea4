"""Condition operators with AWS's semantics.

A condition block is true when every operator in it is true; an operator is true when every key under it
is; a key is true when the request's value matches any of the policy's values. Context keys are looked up
without regard to case. A key the request does not carry makes a positive operator false and a negated
one (``StringNotEquals``...) true; ``...IfExists`` makes it true for both. ``ForAllValues:`` is true when
every value the request carries matches (so also when it carries none); ``ForAnyValue:`` when at least one
does. ``Null`` tests only presence.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nodecycle_sandbox.iam.matching import arn_matches, like

# The request's condition keys (lower case) -> their values (several for multi-valued keys like aws:TagKeys).
Context = Mapping[str, tuple[str, ...]]

_Match = Callable[[str, str], bool]  # (policy value, request value) -> match

_POSITIVE: dict[str, _Match] = {
    "StringEquals": lambda p, v: p == v,
    "StringEqualsIgnoreCase": lambda p, v: p.lower() == v.lower(),
    "StringLike": lambda p, v: like(p, v),
    "ArnEquals": arn_matches,  # ArnEquals accepts wildcards too, as ArnLike does
    "ArnLike": arn_matches,
    "Bool": lambda p, v: p.lower() == v.lower(),
}
_NEGATED = {
    "StringNotEquals": "StringEquals",
    "StringNotEqualsIgnoreCase": "StringEqualsIgnoreCase",
    "StringNotLike": "StringLike",
    "ArnNotEquals": "ArnEquals",
    "ArnNotLike": "ArnLike",
}
OPERATORS = frozenset({*_POSITIVE, *_NEGATED, "Null"})


class ConditionError(ValueError):
    """A condition the sandbox cannot evaluate faithfully (refused rather than ignored)."""


@dataclass(frozen=True)
class Condition:
    operator: str  # as written, e.g. "ForAllValues:StringEquals" or "StringLikeIfExists"
    key: str  # as written, e.g. "aws:ResourceTag/nodecycle:owner"
    values: tuple[str, ...]

    def holds(self, context: Context) -> bool:
        return _holds(self.operator, self.key.lower(), self.values, context)


def parse_conditions(block: Mapping[str, Any], source: str) -> tuple[Condition, ...]:
    conditions = []
    for operator, keys in block.items():
        _base(operator, source)  # validates
        if not isinstance(keys, Mapping):
            raise ConditionError(f"{source}: {operator} must map condition keys to values")
        for key, raw in keys.items():
            values = raw if isinstance(raw, list) else [raw]
            strings = tuple(_string(v) for v in values)
            if any("${" in v for v in strings):
                raise ConditionError(f"{source}: policy variables are not supported ({key}: {raw!r})")
            conditions.append(Condition(operator, key, strings))
    return tuple(conditions)


def _string(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _base(operator: str, source: str) -> tuple[str | None, str, bool]:
    """(set operator, base operator, IfExists)."""
    set_operator, _, rest = operator.rpartition(":")
    if set_operator not in ("", "ForAllValues", "ForAnyValue"):
        raise ConditionError(f"{source}: unknown set operator {set_operator!r}")
    if_exists = rest.endswith("IfExists") and rest != "IfExists"
    base = rest.removesuffix("IfExists") if if_exists else rest
    if base not in OPERATORS:
        raise ConditionError(f"{source}: the sandbox does not evaluate condition operator {operator!r}")
    if base == "Null" and (if_exists or set_operator):
        raise ConditionError(f"{source}: {operator} is not a valid operator")
    return set_operator or None, base, if_exists


def _holds(operator: str, key: str, values: tuple[str, ...], context: Context) -> bool:
    set_operator, base, if_exists = _base(operator, "condition")
    present = context.get(key, ())
    if base == "Null":
        return all((v.lower() == "true") == (not present) for v in values)
    negated = base in _NEGATED
    match = _POSITIVE[_NEGATED.get(base, base)]

    def matches(value: str) -> bool:
        return any(match(policy, value) for policy in values)

    if set_operator == "ForAllValues":
        return all((not matches(v)) if negated else matches(v) for v in present)
    if set_operator == "ForAnyValue":
        return any((not matches(v)) if negated else matches(v) for v in present)
    if not present:
        return if_exists or negated
    hit = any(matches(v) for v in present)
    return not hit if negated else hit
