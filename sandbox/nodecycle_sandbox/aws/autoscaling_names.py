"""DescribeAutoScalingGroups held to Auto Scaling's limit on the group names of a call, where moto takes any.

Auto Scaling answers a ``ValidationError``, "The number of group names that may be passed in is limited to 50", for a
call naming more than 50 groups (boto/botocore#1444; kubernetes/autoscaler#1228, fixed by fetching the names in
chunks of 50); its API reference: "By default, you can only specify up to 50 names. You can optionally increase this
limit using the MaxRecords property" (at most 100). moto described any number of names, so a caller that named every
group of a stack in one call passed in the sandbox and failed on a stack managing more than 50 groups.
"""

from __future__ import annotations

from typing import Any

from moto.autoscaling.exceptions import ValidationError
from moto.autoscaling.responses import AutoScalingResponse

MAX_NAMES = 50
_MARKER = "_nodecycle_sandbox_group_names"


def install() -> None:
    """Idempotent: a second call changes nothing."""
    if getattr(AutoScalingResponse, _MARKER, False):
        return
    original = AutoScalingResponse.describe_auto_scaling_groups

    def describe_auto_scaling_groups(self: AutoScalingResponse) -> Any:
        names = self._get_param("AutoScalingGroupNames", []) or []
        if len(names) > max(MAX_NAMES, self._get_int_param("MaxRecords", MAX_NAMES)):
            raise ValidationError(
                f"The number of group names that may be passed in is limited to {MAX_NAMES}"
            )
        return original(self)

    AutoScalingResponse.describe_auto_scaling_groups = describe_auto_scaling_groups  # type: ignore[method-assign]
    setattr(AutoScalingResponse, _MARKER, True)
