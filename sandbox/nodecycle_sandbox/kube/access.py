"""Who is asking, and may they: EKS authentication, impersonation and RBAC for the API server.

An EKS bearer token is a presigned STS ``GetCallerIdentity`` URL; its ``X-Amz-Credential`` names the access
key that signed it. EKS turns that key's IAM identity into a Kubernetes user and groups: the cluster
creator is an administrator (``system:masters``); a role is mapped by its access entry (EKS's default user
name ``arn:aws:sts::<account>:assumed-role/<role>/<session>``, the entry's groups) or, failing that, by the
``mapRoles`` of ``kube-system/aws-auth`` (clusters whose authentication mode includes ``CONFIG_MAP``).
Anyone else gets 401, as on EKS. Every identity also belongs to ``system:authenticated``.

Where the entries and the mode come from: EKS, read at authentication (``read_access_from``: the sandbox
passes a reader of its EKS emulation), so an entry deleted or changed through the EKS API, or a mode moved to
``API``, takes effect as on EKS, whose authenticator lags the API by a few seconds (``AUTHENTICATOR_LAG``: what
was read of a role is kept that long). A server with no such reader (one started alone) maps roles by the
entries it was handed (``add_access_entries``) and reads aws-auth too.

An administrator may impersonate (``Impersonate-User`` / ``Impersonate-Group``, what ``kubectl --as``
sends); anyone else needs RBAC's ``impersonate`` verb on ``users`` and ``groups``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from nodecycle_sandbox.kube import errors
from nodecycle_sandbox.kube.rbac import (
    AUTHENTICATED,
    MASTERS,
    UNAUTHENTICATED,
    Attributes,
    Rbac,
    User,
    forbidden_message,
)

_log = logging.getLogger(__name__)

ADMIN_USER = "kubernetes-admin"
JOURNAL_LIMIT = 200_000
AWS_AUTH = ("kube-system", "aws-auth")
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
ANONYMOUS = "system:anonymous"
SESSION_NAME = "{{SessionName}}"  # in an entry's user name, the session's (EKS's default for a role has it)
# EKS's authentication modes: which of access entries and aws-auth the authenticator reads.
CONFIG_MAP, API_AND_CONFIG_MAP, API = "CONFIG_MAP", "API_AND_CONFIG_MAP", "API"
# How long what EKS said of a role is believed: EKS's authenticator takes a few seconds to see an entry's change.
AUTHENTICATOR_LAG = 2.0


@dataclass(frozen=True)
class AccessEntry:
    """An EKS access entry: a role's ARN and the Kubernetes groups (and user name) it maps to."""

    principal_arn: str
    groups: tuple[str, ...]
    username: str | None = None  # None: EKS's default for a role


@dataclass(frozen=True)
class RoleAccess:
    """What EKS says of a role at one moment: the cluster's authentication mode, and the role's entry if any."""

    mode: str
    entry: AccessEntry | None

    @property
    def entries_read(self) -> bool:
        return self.mode != CONFIG_MAP

    @property
    def aws_auth_read(self) -> bool:
        return self.mode != API


# What EKS says of a role (its ARN) now; raises if EKS cannot be read.
RoleAccessReader = Callable[[str], RoleAccess]


@dataclass(frozen=True)
class Authorization:
    user: User
    attributes: Attributes
    allowed: bool


class Access:
    def __init__(
        self,
        rbac: Rbac,
        read_config_map: Callable[[str, str], Mapping[str, Any] | None],
        *,
        lag: float = AUTHENTICATOR_LAG,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rbac = rbac
        self._read_config_map = read_config_map
        self._lag = lag
        self._clock = clock
        self._reader: RoleAccessReader | None = None
        self._read: dict[str, tuple[float, RoleAccess]] = {}  # role ARN -> (when read, what EKS said)
        self._reading = threading.Lock()
        self._lock = threading.Lock()
        self._admin_keys: set[str] = set()
        self._roles_by_key: dict[str, tuple[str, str]] = {}  # access key -> (role ARN, session name)
        self._entries: dict[str, AccessEntry] = {}
        self._journal: list[Authorization] = []

    # -- what the cluster knows -------------------------------------------------------------------

    def add_admin_key(self, access_key: str) -> None:
        """The cluster creator's (or another administrator's) key: ``system:masters``."""
        with self._lock:
            self._admin_keys.add(access_key)

    def add_role_key(self, access_key: str, role_arn: str, session_name: str) -> None:
        """What STS says of this key: a session of that role (a Lambda function's execution role)."""
        with self._lock:
            self._roles_by_key[access_key] = (role_arn, session_name)

    def add_access_entries(self, entries: Iterable[AccessEntry]) -> None:
        """Entries to map roles by, on a server with no reader of EKS (``read_access_from``)."""
        with self._lock:
            self._entries.update({entry.principal_arn: entry for entry in entries})

    def read_access_from(self, reader: RoleAccessReader) -> None:
        """Map roles by what ``reader`` says of them at authentication (EKS's entries and mode), believed for
        the authenticator's lag, instead of the entries handed to ``add_access_entries``."""
        with self._lock:
            self._reader = reader
            self._read.clear()

    @property
    def reads_eks(self) -> bool:
        return self._reader is not None

    # -- per request ------------------------------------------------------------------------------

    def authenticate(self, access_key: str | None, headers: Mapping[str, str]) -> User:
        user = self._user_of_key(access_key)
        if user is None:
            raise errors.unauthorized()
        return self._impersonated(user, headers)

    def authorize(self, user: User, attributes: Attributes) -> None:
        allowed = self.rbac.authorize(user, attributes).allowed
        if MASTERS not in user.groups:
            with self._lock:
                if len(self._journal) < JOURNAL_LIMIT:
                    self._journal.append(Authorization(user, attributes, allowed))
        if not allowed:
            message, details = forbidden_message(user, attributes)
            raise errors.ApiError(403, "Forbidden", message, details)

    def journal(self) -> list[Authorization]:
        """Every authorization of a non-administrator so far, in order (what the necessity analysis replays)."""
        with self._lock:
            return list(self._journal)

    def _user_of_key(self, access_key: str | None) -> User | None:
        if access_key is None:
            return None
        with self._lock:
            if access_key in self._admin_keys:
                return User(ADMIN_USER, (MASTERS, AUTHENTICATED))
            role = self._roles_by_key.get(access_key)
            if role is None:
                return None
            role_arn, session = role
        said = self._role_access(role_arn)
        if said is None:
            return None
        entry = said.entry if said.entries_read else None
        if entry is not None:
            username = entry.username or assumed_role_user(role_arn, session)
            return User(username.replace(SESSION_NAME, session), (*entry.groups, AUTHENTICATED))
        if not said.aws_auth_read:
            return None
        mapped = self._aws_auth_mapping(role_arn)
        if mapped is None:
            return None
        username, groups = mapped
        return User(username.replace("{{SessionName}}", session), (*groups, AUTHENTICATED))

    def _role_access(self, role_arn: str) -> RoleAccess | None:
        """What EKS says of the role, as its authenticator knows it (read again once the lag is past); None
        when EKS could not be read and nothing was before (the request is then unauthenticated)."""
        with self._lock:
            reader = self._reader
            if reader is None:
                return RoleAccess(API_AND_CONFIG_MAP, self._entries.get(role_arn))
            known = self._read.get(role_arn)
        if known is not None and self._clock() - known[0] < self._lag:
            return known[1]
        with self._reading:  # one read of EKS at a time: the requests waiting on it take its answer
            with self._lock:
                known = self._read.get(role_arn)
            if known is not None and self._clock() - known[0] < self._lag:
                return known[1]
            try:
                said = reader(role_arn)
            except Exception as error:  # whatever EKS's failure, the authenticator answers
                _log.warning("EKS could not be read for %s's access entry: %r", role_arn, error)
                return known[1] if known is not None else None
            with self._lock:
                self._read[role_arn] = (self._clock(), said)
            return said

    def _aws_auth_mapping(self, role_arn: str) -> tuple[str, tuple[str, ...]] | None:
        config_map = self._read_config_map(*AWS_AUTH)
        if not config_map:
            return None
        for mapping in yaml.safe_load((config_map.get("data") or {}).get("mapRoles") or "[]") or []:
            if mapping.get("rolearn") == role_arn:
                return str(mapping.get("username") or role_arn), tuple(mapping.get("groups") or ())
        return None

    def _impersonated(self, user: User, headers: Mapping[str, str]) -> User:
        as_user = headers.get("impersonate-user")
        as_groups = [g.strip() for g in headers.get("impersonate-group", "").split(",") if g.strip()]
        if as_user is None:
            if as_groups:
                raise errors.bad_request("requested impersonation of groups without impersonating a user")
            return user
        # As k8s.io/apiserver's impersonation filter: a service account's user name is impersonated as the
        # service account (the verb on "serviceaccounts" in its namespace), which has its groups when none
        # are asked for; every user but system:anonymous is also system:authenticated, and system:anonymous
        # system:unauthenticated, unless a group asked for says either.
        groups = list(as_groups)
        if as_user.startswith(SERVICE_ACCOUNT_PREFIX):
            namespace, _, name = as_user.removeprefix(SERVICE_ACCOUNT_PREFIX).partition(":")
            if not namespace or not name or ":" in name:
                raise errors.bad_request(f"invalid service account user name {as_user!r}")
            attributes = Attributes("impersonate", resource="serviceaccounts", namespace=namespace, name=name)
            self.authorize(user, attributes)
            if not groups:
                groups = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"]
        else:
            self.authorize(user, Attributes("impersonate", resource="users", name=as_user))
        for group in as_groups:
            self.authorize(user, Attributes("impersonate", resource="groups", name=group))
        if as_user == ANONYMOUS:
            if UNAUTHENTICATED not in groups:
                groups.append(UNAUTHENTICATED)
        elif AUTHENTICATED not in groups and UNAUTHENTICATED not in groups:
            groups.append(AUTHENTICATED)
        return User(as_user, tuple(groups))


def assumed_role_user(role_arn: str, session: str) -> str:
    """EKS's default user name for a role's access entry."""
    account = role_arn.split(":")[4]
    return f"arn:aws:sts::{account}:assumed-role/{role_arn.rsplit('/', 1)[-1]}/{session}"


def load_manifest(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]
