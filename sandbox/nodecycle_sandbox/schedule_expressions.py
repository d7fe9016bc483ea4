"""What EventBridge takes as a rule's ScheduleExpression, for the sandbox's EventBridge (``aws/events_schedules.py``)
and for the runner, which reads the template's schedules before it creates their rules (``runner/functions.py``).

EventBridge user guide (scheduled rules, rate and cron expressions reference): ``rate(value unit)``, the value a
positive whole number, the unit one of minute | minutes | hour | hours | day | days, singular when the value is 1
and plural when it is more ("rate(1 hours) and rate(5 hour) aren't valid"); ``cron(fields)``, six fields
separated by blanks, of which the day of the month and the day of the week cannot both be given (one is "?").
PutRule refuses anything else with ValidationException "Parameter ScheduleExpression is not valid.", and a stack
whose schedule event has such an expression fails there.
"""

from __future__ import annotations

import re

INVALID = "Parameter ScheduleExpression is not valid."
_RATE = re.compile(r"rate\(([0-9]+) (minute|minutes|hour|hours|day|days)\)")
_CRON = re.compile(r"cron\((.*)\)")
_UNIT_SECONDS = {"minute": 60, "hour": 3600, "day": 86400}


class InvalidScheduleExpression(ValueError):
    """An expression PutRule refuses; its message starts with EventBridge's."""


def interval_seconds(expression: str) -> float | None:
    """A rate's interval in seconds; None for a valid cron expression. Raises ``InvalidScheduleExpression``."""
    rate = _RATE.fullmatch(expression)
    if rate is not None:
        value, unit = int(rate[1]), rate[2]
        singular = unit.rstrip("s")
        if value < 1 or (value == 1) != (unit == singular):
            raise InvalidScheduleExpression(
                f"{INVALID} ({expression!r}: a positive value, its unit singular for 1 and plural above)"
            )
        return float(value * _UNIT_SECONDS[singular])
    cron = _CRON.fullmatch(expression)
    if cron is not None:
        fields = cron[1].split()
        if len(fields) == 6 and (fields[2] == "?") != (fields[4] == "?"):
            return None
        raise InvalidScheduleExpression(
            f"{INVALID} ({expression!r}: six fields, one of day-of-month and day-of-week a '?')"
        )
    raise InvalidScheduleExpression(f"{INVALID} ({expression!r}: neither rate(value unit) nor cron(fields))")
