"""PutRule refusing a schedule expression EventBridge refuses (``nodecycle_sandbox.schedule_expressions``).

moto took any ``rate(<digits> <unit>)`` and any ``cron(...)``: rate(1 minutes), rate(5 minute), rate(0 minutes)
and a cron of five fields were rules of the sandbox, and a template's schedule spelled so deployed there and not
on AWS.
"""

from __future__ import annotations

from typing import Any

from moto.events.exceptions import ValidationException
from moto.events.models import EventsBackend

from nodecycle_sandbox.schedule_expressions import INVALID, InvalidScheduleExpression, interval_seconds

_MARKER = "_nodecycle_sandbox_schedules"


def install() -> None:
    """Idempotent: a second call changes nothing."""
    if getattr(EventsBackend, _MARKER, False):
        return
    put_rule = EventsBackend.put_rule

    def checked(self: EventsBackend, name: str, **kwargs: Any) -> Any:
        expression = kwargs.get("scheduled_expression")
        if expression:
            try:
                interval_seconds(str(expression))
            except InvalidScheduleExpression:
                raise ValidationException(INVALID) from None
        return put_rule(self, name, **kwargs)

    EventsBackend.put_rule = checked  # type: ignore[method-assign,assignment]
    setattr(EventsBackend, _MARKER, True)
