"""IAM policy documents parsed into statements: what ``evaluate`` needs, and nothing it cannot honour.

An element the evaluator does not support (a policy variable, an unknown condition operator) raises
``PolicyError`` at parse time instead of being ignored: a sandbox that skips a condition would grant more
than AWS does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from nodecycle_sandbox.iam.conditions import Condition, parse_conditions


class PolicyError(ValueError):
    """A policy document the sandbox cannot evaluate faithfully."""


@dataclass(frozen=True)
class Statement:
    effect: Literal["Allow", "Deny"]
    actions: tuple[str, ...]
    not_action: bool
    # None: no Resource element at all (trust policies).
    resources: tuple[str, ...] | None
    not_resource: bool
    conditions: tuple[Condition, ...]
    # Trust policies: the principals by type ("AWS", "Service", "Federated", "*").
    principals: Mapping[str, tuple[str, ...]] | None = None
    sid: str | None = None
    # Where the statement comes from, for messages and reports: e.g. "DrainFunctionRole/nodecycle-drain#2".
    source: str = ""

    @property
    def label(self) -> str:
        """``<role>/<policy>:<Sid>``, or ``<role>/<policy>#<index>`` for a statement without a Sid."""
        return f"{self.source.rsplit('#', 1)[0]}:{self.sid}" if self.sid else self.source


def parse_policy(document: Mapping[str, Any], *, source: str = "") -> list[Statement]:
    """The statements of one policy document, numbered ``<source>#<index>`` in document order."""
    raw = document.get("Statement")
    if raw is None:
        raise PolicyError(f"{source or 'policy'}: no Statement")
    items = [raw] if isinstance(raw, Mapping) else list(raw)
    return [_statement(item, f"{source}#{index}") for index, item in enumerate(items)]


def _statement(item: Mapping[str, Any], source: str) -> Statement:
    effect = item.get("Effect")
    if effect not in ("Allow", "Deny"):
        raise PolicyError(f"{source}: Effect must be Allow or Deny, not {effect!r}")
    if ("Action" in item) == ("NotAction" in item):
        raise PolicyError(f"{source}: exactly one of Action and NotAction")
    if "Resource" in item and "NotResource" in item:
        raise PolicyError(f"{source}: both Resource and NotResource")
    not_action = "NotAction" in item
    actions = _strings(item["NotAction" if not_action else "Action"], source)
    not_resource = "NotResource" in item
    resources = None
    if "Resource" in item or not_resource:
        resources = _strings(item["NotResource" if not_resource else "Resource"], source)
    for value in (*actions, *(resources or ())):
        if "${" in value:
            raise PolicyError(f"{source}: policy variables are not supported ({value})")
    principals = None
    if "Principal" in item:
        principals = _principals(item["Principal"], source)
    return Statement(
        effect=effect,
        actions=actions,
        not_action=not_action,
        resources=resources,
        not_resource=not_resource,
        conditions=parse_conditions(item.get("Condition") or {}, source),
        principals=principals,
        sid=item.get("Sid"),
        source=source,
    )


def _strings(value: Any, source: str) -> tuple[str, ...]:
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, Sequence) or not values or not all(isinstance(v, str) for v in values):
        raise PolicyError(f"{source}: expected a string or a list of strings, got {value!r}")
    return tuple(values)


def _principals(value: Any, source: str) -> Mapping[str, tuple[str, ...]]:
    if value == "*":
        return {"*": ("*",)}
    if not isinstance(value, Mapping):
        raise PolicyError(f'{source}: Principal must be "*" or a mapping, got {value!r}')
    return {kind: _strings(ids, source) for kind, ids in value.items()}
