"""The filters of EC2's Describe calls held to EC2's limits, where moto takes any.

EC2 answers ``FilterLimitExceeded`` for a call whose filters carry more than 200 values in all ("The maximum number
of filter values specified on a single call is 200") and for a filter value longer than 255 characters ("The
maximum length for a filter value is 255 characters"), the answers EC2 gives DescribeInstances (and the other
Describe calls). moto matched any number of values of any length, so a batch of instance ids one value too large,
or a tag value (a pool name) too long to be looked up, passed in the sandbox.
"""

from __future__ import annotations

from typing import Any

from moto.ec2.exceptions import EC2ClientError
from moto.ec2.responses._base_response import EC2BaseResponse

MAX_VALUES = 200
MAX_VALUE_LENGTH = 255
_MARKER = "_nodecycle_sandbox_filters"


def install() -> None:
    """Idempotent: a second call changes nothing."""
    if getattr(EC2BaseResponse, _MARKER, False):
        return
    original = EC2BaseResponse._filters_from_querystring

    def filters_from_querystring(self: EC2BaseResponse) -> Any:
        filters = original(self)
        values = [str(value) for wanted in filters.values() for value in wanted]
        if len(values) > MAX_VALUES:
            raise EC2ClientError(
                "FilterLimitExceeded",
                f"The maximum number of filter values specified on a single call is {MAX_VALUES}",
            )
        if any(len(value) > MAX_VALUE_LENGTH for value in values):
            raise EC2ClientError(
                "FilterLimitExceeded",
                f"The maximum length for a filter value is {MAX_VALUE_LENGTH} characters",
            )
        return filters

    EC2BaseResponse._filters_from_querystring = filters_from_querystring  # type: ignore[method-assign]
    setattr(EC2BaseResponse, _MARKER, True)
