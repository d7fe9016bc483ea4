"""PutTargets refusing a target's RetryPolicy beyond EventBridge's ranges.

botocore's events model (RetryPolicy): MaximumRetryAttempts 0 to 185, MaximumEventAgeInSeconds 60 to 86,400. A
client checks only the least of each; EventBridge refuses the rest (ValidationException), and CloudFormation fails
the stack whose rule event says so. moto stored any, so a template's RetryPolicy of 186 attempts or a day and a
second deployed in the sandbox.
"""

from __future__ import annotations

from typing import Any

from moto.events.exceptions import ValidationException
from moto.events.models import EventsBackend

RANGES = {"MaximumRetryAttempts": (0, 185), "MaximumEventAgeInSeconds": (60, 86_400)}
_MARKER = "_nodecycle_sandbox_targets"


def check_targets(targets: list[dict[str, Any]]) -> None:
    for number, target in enumerate(targets, start=1):
        for key, (low, high) in RANGES.items():
            value = (target.get("RetryPolicy") or {}).get(key)
            if value is not None and not low <= int(value) <= high:
                where = f"targets.{number}.member.retryPolicy.{key[0].lower()}{key[1:]}"
                bound = (
                    f"greater than or equal to {low}" if int(value) < low else f"less than or equal to {high}"
                )
                raise ValidationException(
                    f"1 validation error detected: Value '{value}' at '{where}' failed to satisfy constraint: "
                    f"Member must have value {bound}"
                )


def install() -> None:
    """Idempotent: a second call changes nothing."""
    if getattr(EventsBackend, _MARKER, False):
        return
    put_targets = EventsBackend.put_targets

    def checked(
        self: EventsBackend, name: str, event_bus_arn: str | None, targets: list[dict[str, Any]]
    ) -> None:
        check_targets(targets)
        put_targets(self, name, event_bus_arn, targets)

    EventsBackend.put_targets = checked  # type: ignore[method-assign]
    setattr(EventsBackend, _MARKER, True)
