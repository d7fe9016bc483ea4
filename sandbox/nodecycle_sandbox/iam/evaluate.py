"""One request against a set of identity (or trust) policy statements, as AWS decides it: an explicit Deny
in a matching statement wins; otherwise a matching Allow allows; otherwise the request is implicitly
denied."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from nodecycle_sandbox.iam.conditions import Context
from nodecycle_sandbox.iam.matching import action_matches, arn_matches
from nodecycle_sandbox.iam.policy import Statement


class Decision(StrEnum):
    ALLOW = "allow"
    IMPLICIT_DENY = "implicit-deny"  # no statement allows it
    EXPLICIT_DENY = "explicit-deny"  # a Deny statement matches


@dataclass(frozen=True)
class Request:
    action: str  # "service:Operation"
    resource: str  # an ARN, or "*" for actions without resource-level permissions
    context: Context = field(default_factory=dict)  # lower-case condition keys -> values
    # Trust policies only: the principal asking, by type ("Service": ("autoscaling.amazonaws.com",)).
    principal: Mapping[str, tuple[str, ...]] | None = None
    # False: the call names a resource that does not exist (``resource`` is the ARN its name would have): judged
    # by that ARN, with no tags to read (not journaled).
    resource_found: bool = True


@dataclass(frozen=True)
class Verdict:
    decision: Decision
    # The deciding statement: the Deny that matched, or the first Allow that matched.
    statement: Statement | None = None

    @property
    def allowed(self) -> bool:
        return self.decision is Decision.ALLOW


def context_of(values: Mapping[str, str | Iterable[str]]) -> Context:
    """A context from keys as AWS spells them; a key's name is compared without regard to case."""
    return {
        key.lower(): (value,) if isinstance(value, str) else tuple(value) for key, value in values.items()
    }


def applies(statement: Statement, request: Request) -> bool:
    """Whether the statement's action, resource, principal and conditions all match the request."""
    hit = any(action_matches(p, request.action) for p in statement.actions)
    if hit == statement.not_action:
        return False
    if statement.resources is not None:
        hit = any(arn_matches(p, request.resource) for p in statement.resources)
        if hit == statement.not_resource:
            return False
    if statement.principals is not None and not _principal_matches(statement, request):
        return False
    return all(condition.holds(request.context) for condition in statement.conditions)


def evaluate(statements: Iterable[Statement], request: Request) -> Verdict:
    allowed: Statement | None = None
    for statement in statements:
        if not applies(statement, request):
            continue
        if statement.effect == "Deny":
            return Verdict(Decision.EXPLICIT_DENY, statement)
        allowed = allowed or statement
    if allowed is not None:
        return Verdict(Decision.ALLOW, allowed)
    return Verdict(Decision.IMPLICIT_DENY)


def _principal_matches(statement: Statement, request: Request) -> bool:
    assert statement.principals is not None
    if "*" in statement.principals:
        return True
    asking = request.principal or {}
    return any(
        any(p == "*" or p == value for p in statement.principals.get(kind, ()) for value in values)
        for kind, values in asking.items()
    )
