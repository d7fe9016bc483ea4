"""The API server's authenticator reads EKS (``Access.read_access_from``) as EKS's does: a role's entry and the
cluster's authentication mode at authentication, believed for the authenticator's lag and no longer; aws-auth only
where the mode reads it, entries only where it reads them. On ``Access`` with a stand-in for EKS and a clock of
the test's (the sandbox's reader of its EKS emulation: tests/sandbox/iam/test_cluster_access_follows_eks.py)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from nodecycle_sandbox.kube.access import (
    API,
    API_AND_CONFIG_MAP,
    AUTHENTICATOR_LAG,
    CONFIG_MAP,
    Access,
    AccessEntry,
    RoleAccess,
)
from nodecycle_sandbox.kube.errors import ApiError
from nodecycle_sandbox.kube.rbac import AUTHENTICATED, Rbac

ROLE = "arn:aws:iam::123456789012:role/nodecycle-DrainFunctionRole"
KEY = "AKIADRAINFUNCTION000"
SESSION = "nodecycle-DrainFunction"
DEFAULT_USERNAME = "arn:aws:sts::123456789012:assumed-role/nodecycle-DrainFunctionRole/{{SessionName}}"


class Eks:
    """What EKS says of the cluster now; ``reads`` counts the authenticator's reads of it."""

    def __init__(self) -> None:
        self.mode = API_AND_CONFIG_MAP
        self.entries: dict[str, AccessEntry] = {
            ROLE: AccessEntry(ROLE, ("nodecycle-drain",), DEFAULT_USERNAME)
        }
        self.reads = 0
        self.down = False

    def __call__(self, role_arn: str) -> RoleAccess:
        self.reads += 1
        if self.down:
            raise ConnectionError("EKS does not answer")
        return RoleAccess(self.mode, self.entries.get(role_arn))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def aws_auth(groups: tuple[str, ...]) -> dict[str, Any]:
    mapping = [{"rolearn": ROLE, "username": "drain-by-aws-auth", "groups": list(groups)}]
    return {"data": {"mapRoles": yaml.safe_dump(mapping)}}


@pytest.fixture
def eks() -> Eks:
    return Eks()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def config_maps() -> dict[tuple[str, str], dict[str, Any]]:
    return {}


@pytest.fixture
def access(eks: Eks, clock: Clock, config_maps: dict[tuple[str, str], dict[str, Any]]) -> Access:
    made = Access(Rbac(), lambda namespace, name: config_maps.get((namespace, name)), clock=clock)
    made.add_role_key(KEY, ROLE, SESSION)
    # what the stack was deployed with: no longer what the server goes by once it reads EKS
    made.add_access_entries([AccessEntry(ROLE, ("deployed-groups",))])
    made.read_access_from(eks)
    return made


def groups_of(access: Access) -> tuple[str, ...] | int:
    try:
        return access.authenticate(KEY, {}).groups
    except ApiError as refused:
        return refused.code


def test_a_role_is_who_its_entry_says_with_the_session_in_its_user_name(access: Access) -> None:
    user = access.authenticate(KEY, {})
    assert (user.name, user.groups) == (
        f"arn:aws:sts::123456789012:assumed-role/nodecycle-DrainFunctionRole/{SESSION}",
        ("nodecycle-drain", AUTHENTICATED),
    )


def test_an_entry_deleted_is_believed_for_the_lag_and_no_longer(
    access: Access, eks: Eks, clock: Clock
) -> None:
    assert groups_of(access) == ("nodecycle-drain", AUTHENTICATED)
    del eks.entries[ROLE]
    clock.now += AUTHENTICATOR_LAG - 0.1
    assert groups_of(access) == ("nodecycle-drain", AUTHENTICATED)  # the authenticator has not seen it yet
    clock.now += 0.2
    assert groups_of(access) == 401
    # and an entry made again, or changed, is seen once the lag is past
    eks.entries[ROLE] = AccessEntry(ROLE, ("nodecycle-other",), None)
    clock.now += AUTHENTICATOR_LAG
    assert groups_of(access) == ("nodecycle-other", AUTHENTICATED)


def test_eks_is_read_once_per_role_within_the_lag(access: Access, eks: Eks, clock: Clock) -> None:
    for _ in range(50):
        groups_of(access)
    clock.now += AUTHENTICATOR_LAG
    groups_of(access)
    assert eks.reads == 2


def test_aws_auth_is_read_in_the_modes_that_read_it_only(
    access: Access, eks: Eks, clock: Clock, config_maps: dict[tuple[str, str], dict[str, Any]]
) -> None:
    del eks.entries[ROLE]
    config_maps["kube-system", "aws-auth"] = aws_auth(("mapped",))
    seen = {}
    for mode in (API_AND_CONFIG_MAP, API):
        eks.mode = mode
        clock.now += AUTHENTICATOR_LAG
        seen[mode] = groups_of(access)
    assert seen == {API_AND_CONFIG_MAP: ("mapped", AUTHENTICATED), API: 401}


def test_a_cluster_in_config_map_mode_reads_no_entry(
    access: Access, eks: Eks, config_maps: dict[tuple[str, str], dict[str, Any]]
) -> None:
    eks.mode = CONFIG_MAP
    assert groups_of(access) == 401
    config_maps["kube-system", "aws-auth"] = aws_auth(("mapped",))
    assert groups_of(access) == ("mapped", AUTHENTICATED)


def test_eks_unreadable_keeps_what_was_read_and_refuses_a_role_never_read(
    access: Access, eks: Eks, clock: Clock
) -> None:
    assert groups_of(access) == ("nodecycle-drain", AUTHENTICATED)
    eks.down = True
    clock.now += AUTHENTICATOR_LAG
    assert groups_of(access) == ("nodecycle-drain", AUTHENTICATED)
    access.add_role_key("AKIANEVERREAD0000000", ROLE.replace("Drain", "Sweeper"), "nodecycle-SweeperFunction")
    with pytest.raises(ApiError) as refused:
        access.authenticate("AKIANEVERREAD0000000", {})
    assert refused.value.code == 401
