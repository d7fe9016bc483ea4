"""EventBridge event pattern matching: exact values, value lists, prefix, suffix, anything-but, exists,
numeric and equals-ignore-case, on nested fields and on array-valued fields (any element matches).

No kinder than EventBridge: ``exists: true`` holds for a leaf only (an object or an empty array at the field is
none: "exists works only on leaf nodes", as the content-filtering docs and SNS's filter policies, the same
matcher, say), and values compare as JSON values (``true`` is not ``1``, as Python's ``True == 1`` would have
it)."""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

_MISSING = object()
_NUMERIC: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    "=": operator.eq,
    ">=": operator.ge,
    ">": operator.gt,
}


class InvalidPattern(ValueError):
    pass


def matches(pattern: Mapping[str, Any], event: Mapping[str, Any]) -> bool:
    for key, rule in pattern.items():
        value = event.get(key, _MISSING) if isinstance(event, Mapping) else _MISSING
        if isinstance(rule, Mapping):
            if not isinstance(value, Mapping) or not matches(rule, value):
                return False
        elif isinstance(rule, list):
            if not _field_matches(rule, value):
                return False
        else:
            raise InvalidPattern(f"pattern values must be objects or arrays, got {rule!r} for {key!r}")
    return True


def _field_matches(rules: list[Any], value: Any) -> bool:
    values = value if isinstance(value, list) else [value]
    for rule in rules:
        if isinstance(rule, Mapping) and "exists" in rule:
            # (exists: false keeps matching only a missing field: what EventBridge makes of an object there is
            # not established, and matching it would be the kinder guess)
            present = _leaf(value) if rule["exists"] else value is not _MISSING
            if present == bool(rule["exists"]):
                return True
            continue
        if value is _MISSING:
            continue
        if any(_value_matches(rule, v) for v in values):
            return True
    return False


def _leaf(value: Any) -> bool:
    """Whether a field holds a leaf: a scalar (null included), or an array with a scalar in it."""
    if isinstance(value, list):
        return any(not isinstance(v, Mapping | list) for v in value)
    return value is not _MISSING and not isinstance(value, Mapping)


def _json_equal(rule: Any, value: Any) -> bool:
    """JSON equality: a boolean equals a boolean only (Python's ``True == 1`` and ``1 == True`` are no JSON's)."""
    if isinstance(rule, bool) or isinstance(value, bool):
        return isinstance(rule, bool) and isinstance(value, bool) and rule is value
    return bool(rule == value)


def _value_matches(rule: Any, value: Any) -> bool:
    if not isinstance(rule, Mapping):
        return _json_equal(rule, value)
    if len(rule) != 1:
        raise InvalidPattern(f"a content filter has exactly one operator: {rule!r}")
    ((op, argument),) = rule.items()
    if op == "prefix":
        return isinstance(value, str) and _affix(argument, value, str.startswith)
    if op == "suffix":
        return isinstance(value, str) and _affix(argument, value, str.endswith)
    if op == "equals-ignore-case":
        return isinstance(value, str) and value.lower() == str(argument).lower()
    if op == "anything-but":
        return not _anything_but_excludes(argument, value)
    if op == "numeric":
        return _numeric(argument, value)
    raise InvalidPattern(f"unsupported pattern operator {op!r}")


def _affix(argument: Any, value: str, test: Callable[[str, str], bool]) -> bool:
    if isinstance(argument, Mapping) and "equals-ignore-case" in argument:
        return test(value.lower(), str(argument["equals-ignore-case"]).lower())
    return test(value, str(argument))


def _anything_but_excludes(argument: Any, value: Any) -> bool:
    if isinstance(argument, list):
        return any(_json_equal(excluded, value) for excluded in argument)
    if isinstance(argument, Mapping):
        return _value_matches(argument, value)
    return _json_equal(argument, value)


def _numeric(argument: list[Any], value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    for index in range(0, len(argument), 2):
        op, bound = argument[index], argument[index + 1]
        if op not in _NUMERIC:
            raise InvalidPattern(f"unsupported numeric operator {op!r}")
        if not _NUMERIC[op](value, bound):
            return False
    return True
