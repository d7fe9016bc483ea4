"""The sandbox's EC2 lag (nodecycle_sandbox.aws.ec2_consistency) is armed for callers by access key id; moto reads a
caller's key from its request's signature only when it is 20 upper-case letters and digits, and takes any other for
its default key. A lag armed for a key of another shape would lag nothing, and a test relying on it would pass on
an EC2 that never lagged: arming refuses it."""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from nodecycle_sandbox.aws.ec2_consistency import LAG
from tests.functions.eip.conftest import Clock

WELL_FORMED = "AKIAFUNCTIONEIPLAG09"
REGION = "eu-west-1"


@pytest.mark.parametrize(
    "key",
    [
        WELL_FORMED + "X",  # 21 characters
        WELL_FORMED[:-1],  # 19
        WELL_FORMED.lower(),
        "AKIA-FUNCTION-EIP-09",
        "AKIAEXAMPLE",  # moto's own default: every request whose key it cannot read
    ],
)
def test_a_key_moto_never_sees_as_a_caller_is_refused(clock: Clock, key: str) -> None:
    with pytest.raises(ValueError, match="20 upper-case letters and digits"):
        LAG.arm(6.0, [WELL_FORMED, key], clock)
    assert not LAG.armed


def test_the_keys_may_be_given_by_any_iterable(clock: Clock) -> None:
    LAG.arm(6.0, iter([WELL_FORMED]), clock)
    assert LAG.lags_for(WELL_FORMED)


def test_a_well_formed_key_is_the_one_moto_sees_and_its_reads_lag(clock: Clock) -> None:
    # Given the lag armed for a well-formed key, and an address allocated just now by another caller
    LAG.arm(6.0, [WELL_FORMED], clock)

    def client(key: str) -> Any:
        return boto3.client("ec2", region_name=REGION, aws_access_key_id=key, aws_secret_access_key="testing")

    allocated = client("AKIATESTOPERATOR0000").allocate_address(Domain="vpc")["AllocationId"]

    # Then the lagging caller does not list it yet, the other does
    assert allocated not in [a["AllocationId"] for a in client(WELL_FORMED).describe_addresses()["Addresses"]]
    assert allocated in [
        a["AllocationId"] for a in client("AKIATESTOPERATOR0000").describe_addresses()["Addresses"]
    ]
