"""Is each permission needed? Replay what the functions were allowed to do without it.

The sandbox records every authorization it decides for a function (AWS: ``AwsControls.authorizations``;
the API server: ``Access.journal``). Taking one IAM statement (or one action of it) or one RBAC rule atom
(a verb on a resource) away and evaluating the recorded, allowed requests again shows which of them would
have been denied: if one would, the scenario that made it would have failed at that call, so the
permission is needed; if none would, nothing the scenarios did needed it.

Replaying is equivalent to running the scenarios again on the reduced policy up to the first request that
changes: evaluation depends only on the request (action, resource, context keys) and the policy, and the
requests before the first denial are the same in both runs. A Deny statement is the other way round: it is
needed when it decided some request (a probe that tries what it forbids).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import yaml

from nodecycle_sandbox.iam.evaluate import Request, evaluate
from nodecycle_sandbox.iam.identities import JournalEntry, role_of
from nodecycle_sandbox.kube.access import Authorization
from nodecycle_sandbox.kube.rbac import Rbac


@dataclass(frozen=True)
class Finding:
    subject: str  # a role's logical id, or an RBAC role ("ClusterRole nodecycle-drain")
    permission: str  # a statement's label (and action), or a rule atom ("get nodes")
    needed_by: int  # recorded requests denied without it (for a Deny: the requests it decided)
    example: str = ""

    @property
    def needed(self) -> bool:
        return self.needed_by > 0

    def line(self) -> str:
        status = f"needed by {self.needed_by:4d}" if self.needed else "NOT NEEDED    "
        return f"{status}  {self.subject:<28} {self.permission}" + (
            f"   e.g. {self.example}" if self.example else ""
        )


def aws_findings(
    roles: Mapping[str, Mapping[str, Any]],
    journal: Sequence[JournalEntry],
    *,
    by_action: bool = True,
    by_resource: bool = True,
) -> list[Finding]:
    """For every statement of every role (with ``by_action``, every action of a statement with several;
    with ``by_resource``, every resource of a statement with several): how many recorded requests it alone
    allowed. A statement some request needs may still name a resource none does: a grant wider than any
    path."""
    findings = []
    for logical_id, spec in roles.items():
        role = role_of(spec)
        mine = [entry for entry in journal if entry.principal == role.arn]
        allowed = _unique(Request(e.action, e.resource, e.context) for e in mine if e.allowed)
        statements = list(role.statements)
        for index, statement in enumerate(statements):
            if statement.effect == "Deny":
                decided = [e for e in mine if not e.allowed and e.statement == statement.label]
                example = f"{decided[0].action} {decided[0].resource}" if decided else ""
                findings.append(Finding(logical_id, statement.label, len(decided), example))
                continue
            others = statements[:index] + statements[index + 1 :]
            findings.append(_replay(logical_id, statement.label, others, allowed))
            if by_action and len(statement.actions) > 1 and not statement.not_action:
                for action in statement.actions:
                    narrowed = replace(statement, actions=tuple(a for a in statement.actions if a != action))
                    reduced = [*others[:index], narrowed, *others[index:]]
                    findings.append(_replay(logical_id, f"{statement.label} {action}", reduced, allowed))
            resources = statement.resources or ()
            if by_resource and len(resources) > 1 and not statement.not_resource:
                for resource in resources:
                    narrowed = replace(statement, resources=tuple(r for r in resources if r != resource))
                    reduced = [*others[:index], narrowed, *others[index:]]
                    findings.append(_replay(logical_id, f"{statement.label} on {resource}", reduced, allowed))
    return findings


def _replay(subject: str, permission: str, statements: list[Any], requests: Sequence[Request]) -> Finding:
    denied = [r for r in requests if not evaluate(statements, r).allowed]
    example = f"{denied[0].action} {denied[0].resource}" if denied else ""
    return Finding(subject, permission, len(denied), example)


def rbac_findings(manifest: str, journal: Sequence[Authorization]) -> list[Finding]:
    """For every verb on every resource of every rule of the manifest's roles: how many recorded, allowed
    requests only it allowed."""
    documents = [d for d in yaml.safe_load_all(manifest) if d]
    exploded = [_explode(d) for d in documents]
    allowed = _unique_authorizations(a for a in journal if a.allowed)
    findings = []
    for position, document in enumerate(exploded):
        if document.get("kind") not in ("Role", "ClusterRole"):
            continue
        subject = f"{document['kind']} {document['metadata']['name']}"
        for index, rule in enumerate(document["rules"]):
            reduced_rules = document["rules"][:index] + document["rules"][index + 1 :]
            reduced = [*exploded[:position], {**document, "rules": reduced_rules}, *exploded[position + 1 :]]
            rbac = Rbac()
            rbac.load(reduced)
            denied = [a for a in allowed if not rbac.authorize(a.user, a.attributes).allowed]
            names = f" {','.join(rule['resourceNames'])}" if rule.get("resourceNames") else ""
            permission = f"{rule['verbs'][0]} {rule['resources'][0]}{names}"
            example = ""
            if denied:
                attributes = denied[0].attributes
                example = f"{attributes.verb} {attributes.resource} {attributes.namespace}/{attributes.name}"
            findings.append(Finding(subject, permission, len(denied), example))
    return findings


def _explode(document: Mapping[str, Any]) -> dict[str, Any]:
    """A role with one rule per verb and resource (the same grants)."""
    if document.get("kind") not in ("Role", "ClusterRole"):
        return dict(document)
    rules = [
        {**rule, "verbs": [verb], "resources": [resource]}
        for rule in document.get("rules") or []
        for resource in rule.get("resources") or []
        for verb in rule["verbs"]
    ]
    return {**document, "rules": rules}


def _unique(requests: Iterable[Request]) -> list[Request]:
    seen: dict[tuple[Any, ...], Request] = {}
    for request in requests:
        key = (request.action, request.resource, tuple(sorted(request.context.items())))
        seen.setdefault(key, request)
    return list(seen.values())


def _unique_authorizations(authorizations: Iterable[Authorization]) -> list[Authorization]:
    return list({(a.user, a.attributes): a for a in authorizations}.values())
