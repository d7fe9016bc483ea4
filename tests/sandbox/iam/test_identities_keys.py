"""A function's access key that moto cannot parse from a request's signature (not 20 upper-case letters and
digits) signs its requests as the administrator's: a test of the role's permissions passed without IAM judging
anything. The sandbox's identities refuse such a key when it is registered."""

from __future__ import annotations

from typing import Any

import pytest

from nodecycle_sandbox.iam.identities import Identities

ROLE: dict[str, Any] = {"arn": "arn:aws:iam::123456789012:role/r", "policies": []}


def _key(access_key: str) -> dict[str, str]:
    return {"access_key": access_key, "role_arn": ROLE["arn"], "session_name": "f", "account": "123456789012"}


@pytest.mark.parametrize("access_key", ["AKIAFUNCTION00000001", "AKIA0123456789ABCDEF"])
def test_a_key_as_aws_issues_them_acts_as_its_role(access_key: str) -> None:
    identities = Identities()
    identities.register([ROLE], [_key(access_key)])
    principal = identities.principal(access_key)
    assert principal is not None
    assert principal.role.arn == ROLE["arn"]


@pytest.mark.parametrize(
    "access_key",
    ["AKIAFUNCTION0000001", "AKIAFUNCTION000000001", "akiafunction00000001", "key-DrainFunction"],
)
def test_a_key_moto_would_not_read_is_refused(access_key: str) -> None:
    identities = Identities()
    with pytest.raises(ValueError, match="20 upper-case letters and digits"):
        identities.register([ROLE], [_key(access_key)])
    assert identities.principal(access_key) is None
