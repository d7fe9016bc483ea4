"""Who calls AWS in the sandbox, and with which policies: one table per process (the AWS process's moto
consults it on every call, as moto's own backends are per process).

A function's access key stands for its role's session (``arn:aws:sts::<account>:assumed-role/<role>/<fn>``)
and is evaluated against the role's policies. Any other key is the account's administrator: the operator,
the tests and the CLI. Roles without a key (the hook notification role) are looked up by ARN when a service
assumes them.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from nodecycle_sandbox.iam.policy import PolicyError, Statement, parse_policy

# Decisions remembered per process (a drain-heavy test makes a few thousand calls).
JOURNAL_LIMIT = 200_000
# An access key id as AWS issues them and moto parses them from a request's signature
ACCESS_KEY_ID = re.compile(r"[A-Z0-9]{20}")


@dataclass(frozen=True)
class Role:
    arn: str
    trust: tuple[Statement, ...]
    statements: tuple[Statement, ...]

    @property
    def name(self) -> str:
        return self.arn.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Principal:
    """A role's session, as a function's access key stands for it."""

    access_key: str
    role: Role
    session_name: str
    account: str

    @property
    def arn(self) -> str:
        return f"arn:aws:sts::{self.account}:assumed-role/{self.role.name}/{self.session_name}"


@dataclass(frozen=True)
class JournalEntry:
    """One authorization: who asked for what, and what was decided (the necessity analysis replays these)."""

    principal: str  # the role's ARN
    action: str
    resource: str
    context: Mapping[str, tuple[str, ...]]
    allowed: bool
    statement: str  # the deciding statement's label, "" when none


def role_of(spec: Mapping[str, Any]) -> Role:
    """A role from its plain description: ``{"arn", "trust", "policies": [{"source", "document"}]}``.

    Refuses what IAM refuses ("IAM JSON policy elements": Resource, Principal): a statement of a permissions
    policy without Resource or NotResource ("Policy statement must contain resources."), or naming a
    Principal ("Policy document should not specify a principal."); a trust statement without a Principal,
    or with a Resource ("Has prohibited field Resource"). The evaluator reads a missing Resource as every
    resource, which is right for a trust policy only."""
    statements: list[Statement] = []
    for policy in spec.get("policies") or []:
        statements += parse_policy(policy["document"], source=policy["source"])
    trust = parse_policy(spec["trust"], source=f"{spec['arn']}/trust") if spec.get("trust") else []
    for statement in statements:
        if statement.resources is None:
            raise PolicyError(f"{statement.source}: Policy statement must contain resources.")
        if statement.principals is not None:
            raise PolicyError(f"{statement.source}: Policy document should not specify a principal.")
    for statement in trust:
        if statement.principals is None:
            raise PolicyError(f"{statement.source}: a trust policy statement must name a Principal")
        if statement.resources is not None:
            raise PolicyError(f"{statement.source}: Has prohibited field Resource")
    return Role(arn=spec["arn"], trust=tuple(trust), statements=tuple(statements))


class Identities:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._keys: dict[str, Principal] = {}
        self._roles: dict[str, Role] = {}
        self._journal: list[JournalEntry] = []

    def register(self, roles: Iterable[Mapping[str, Any]], keys: Iterable[Mapping[str, str]]) -> None:
        """Roles (see ``role_of``) and the access keys that act as them: ``{"access_key", "role_arn",
        "session_name", "account"}``. Plain data, so that it crosses the pipe into the AWS process."""
        parsed = {role.arn: role for role in map(role_of, roles)}
        with self._lock:
            self._roles.update(parsed)
            for key in keys:
                if not ACCESS_KEY_ID.fullmatch(key["access_key"]):
                    # (moto reads a request's identity only from a key of that form: any other signs the
                    # request as the administrator, and a test of the role's permissions passes unchecked)
                    raise ValueError(
                        f"access key {key['access_key']!r} is not 20 upper-case letters and digits: moto would "
                        "take its requests for the administrator's"
                    )
                role = self._roles[key["role_arn"]]
                known = self._keys.get(key["access_key"])
                if known is not None and known.role.arn != role.arn:
                    raise ValueError(f"access key {key['access_key']} already acts as {known.role.arn}")
                self._keys[key["access_key"]] = Principal(
                    key["access_key"], role, key["session_name"], key["account"]
                )

    def principal(self, access_key: str) -> Principal | None:
        """None: not a function's key, so the administrator."""
        with self._lock:
            return self._keys.get(access_key)

    def role(self, arn: str) -> Role | None:
        with self._lock:
            return self._roles.get(arn)

    def record(self, entry: JournalEntry) -> None:
        with self._lock:
            if len(self._journal) < JOURNAL_LIMIT:
                self._journal.append(entry)

    def journal(self) -> list[JournalEntry]:
        with self._lock:
            return list(self._journal)

    def clear(self) -> None:
        with self._lock:
            self._keys.clear()
            self._roles.clear()
            self._journal.clear()


IDENTITIES = Identities()
