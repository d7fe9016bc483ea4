"""Label and field selectors, with the syntax and the semantics of k8s.io/apimachinery."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nodecycle_sandbox.kube import errors
from nodecycle_sandbox.kube.object_meta import label_value_problem, qualified_name_problem
from nodecycle_sandbox.kube.resources import BOOLEAN_FIELDS, ResourceType

_KEY = r"(?:[A-Za-z0-9.-]+/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
_VALUE = r"(?:(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
# The lexer's whitespace (labels.isWhitespace): any other character, a no-break space or a vertical tab, is
# part of the word it touches (Python's \s and str.strip() take those for whitespace too)
_SPACE = " \t\r\n"
_WS = rf"[{_SPACE}]"
_SET_TERM = re.compile(rf"^({_KEY}){_WS}+(in|notin){_WS}*\(([^()]*)\)$")
_EQ_TERM = re.compile(rf"^({_KEY}){_WS}*(==|=|!=){_WS}*({_VALUE})$")
_CMP_TERM = re.compile(
    rf"^({_KEY}){_WS}*([<>]){_WS}*([0-9]+)$"
)  # a label value: no sign, as the API server says
_EXISTS_TERM = re.compile(rf"^(!?){_WS}*({_KEY})$")
_VALUE_ONLY = re.compile(rf"^{_VALUE}$")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # In, NotIn, Exists, DoesNotExist, Gt, Lt
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "In":
            return present and value in self.values
        if self.op == "NotIn":
            return not present or value not in self.values
        if self.op == "Exists":
            return present
        if self.op == "DoesNotExist":
            return not present
        if not present or value is None or not re.fullmatch(r"-?[0-9]+", value):
            return False
        (bound,) = self.values
        return int(value) > int(bound) if self.op == "Gt" else int(value) < int(bound)


@dataclass(frozen=True)
class LabelSelector:
    """All requirements must hold; no requirement matches everything. ``NOTHING`` matches no object."""

    requirements: tuple[Requirement, ...] = ()
    matches_nothing: bool = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        return not self.matches_nothing and all(r.matches(labels) for r in self.requirements)


EVERYTHING = LabelSelector()
NOTHING = LabelSelector(matches_nothing=True)


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside ``( )``."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def parse_label_selector(text: str) -> LabelSelector:
    """Parse the ``labelSelector`` query syntax; raises a 400 ApiError when it is malformed."""
    if not text.strip(_SPACE):
        return EVERYTHING
    requirements: list[Requirement] = []
    for raw in _split_top_level(text):
        term = raw.strip(_SPACE)
        if m := _SET_TERM.match(term):
            # members may be empty, as the API server reads them: "()" is the set {""}
            values = frozenset(v.strip(_SPACE) for v in m.group(3).split(","))
            if not all(_VALUE_ONLY.match(v) for v in values):
                raise errors.bad_request(f"unable to parse requirement: invalid value in {term!r}")
            requirements.append(Requirement(m.group(1), "In" if m.group(2) == "in" else "NotIn", values))
        elif m := _EQ_TERM.match(term):
            op = "NotIn" if m.group(2) == "!=" else "In"
            requirements.append(Requirement(m.group(1), op, frozenset({m.group(3)})))
        elif m := _CMP_TERM.match(term):
            requirements.append(
                Requirement(m.group(1), "Gt" if m.group(2) == ">" else "Lt", frozenset({m.group(3)}))
            )
        elif m := _EXISTS_TERM.match(term):
            requirements.append(Requirement(m.group(2), "DoesNotExist" if m.group(1) else "Exists"))
        else:
            raise errors.bad_request(
                f"unable to parse requirement: found {term!r}, expected a label requirement"
            )
    for requirement in requirements:
        why = _requirement_problem(requirement)
        if why is not None:
            raise errors.bad_request(f"unable to parse requirement: {why}")
    return LabelSelector(tuple(requirements))


def _requirement_problem(requirement: Requirement) -> str | None:
    """What k8s.io/apimachinery's labels.NewRequirement refuses in a parsed requirement: a key that is not a
    qualified name, a value that is not a label value (63 characters at most), and for ``<`` and ``>`` a value
    that is not a 64-bit integer."""
    why = qualified_name_problem(requirement.key)
    if why is not None:
        return f"key: Invalid value: {requirement.key!r}: {why}"
    for value in sorted(requirement.values):
        if requirement.op in ("Gt", "Lt") and not -(2**63) <= int(value) < 2**63:
            return (
                f"values[0]: Invalid value: {value!r}: for 'Gt', 'Lt' operators, the value must be an integer"
            )
        why = label_value_problem(value)
        if why is not None:
            return f"values: Invalid value: {value!r}: {why}"
    return None


def from_label_selector_object(spec: Mapping[str, Any] | None) -> LabelSelector:
    """A ``metav1.LabelSelector`` object: null selects nothing, ``{}`` selects everything."""
    if spec is None:
        return NOTHING
    requirements = [
        Requirement(k, "In", frozenset({str(v)})) for k, v in (spec.get("matchLabels") or {}).items()
    ]
    for expr in spec.get("matchExpressions") or []:
        op = expr.get("operator")
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise ValueError(f"unsupported label selector operator {op!r}")
        requirements.append(Requirement(str(expr.get("key")), op, frozenset(expr.get("values") or ())))
    return LabelSelector(tuple(requirements))


# --- field selectors -------------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldTerm:
    field: str
    value: str
    negate: bool


@dataclass(frozen=True)
class FieldSelector:
    terms: tuple[FieldTerm, ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all((field_value(obj, t.field) == t.value) != t.negate for t in self.terms)


def _split_escaped(text: str, separator: str) -> list[str]:
    """Split on ``separator`` unless escaped with a backslash; escapes are kept for the next stage."""
    parts: list[str] = []
    current: list[str] = []
    escaped = False
    for char in text:
        if escaped:
            current.append("\\" + char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == separator:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def parse_field_selector(text: str, rt: ResourceType) -> FieldSelector:
    """Parse ``fieldSelector``; a field the resource does not index is a 400, as on a real server."""
    if not text.strip():
        return FieldSelector()
    terms: list[FieldTerm] = []
    for raw in _split_escaped(text, ","):
        m = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|!=|=)(.*)$", raw)
        if not m:
            raise errors.bad_request(f"invalid selector: {raw!r}; can't understand it")
        field, op, value = m.group(1), m.group(2), _unescape(m.group(3).strip())
        if field not in rt.selectable_fields:
            raise errors.bad_request(f"field label not supported: {field}")
        terms.append(FieldTerm(field, value, op == "!="))
    return FieldSelector(tuple(terms))


def field_value(obj: Mapping[str, Any], path: str) -> str:
    current: Any = obj
    for part in path.split("."):
        current = current.get(part) if isinstance(current, Mapping) else None
    if path in BOOLEAN_FIELDS:
        return "true" if current else "false"
    return "" if current is None else str(current)
