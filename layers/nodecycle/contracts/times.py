"""The times AWS writes into the events intake reads."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, AwareDatetime, BeforeValidator

# Far wider than any time an AWS service writes, far enough from the calendar's ends (years 1 and 9999) that no
# deadline intake reckons from a time (a hook's timeouts after it, up to 48 h; a maintenance lead before it, up
# to a week) overflows: an OverflowError there is no fault of the input's name, and would be retried as if
# it were a passing one, then dead-lettered.
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
LATEST = datetime(3000, 1, 1, tzinfo=UTC)


def _written(value: object) -> object:
    # AWS writes its times as ISO 8601 strings. Pydantic would read a number as seconds or milliseconds since
    # the epoch (which, by its size) and a boolean as neither: a message with one is not AWS's, and is refused
    # naming its field rather than taken in under a time guessed for it.
    if isinstance(value, (int, float)):
        raise ValueError(f"a time is written as an ISO 8601 string, not a {type(value).__name__}")
    return value


def _in_range(value: datetime) -> datetime:
    if not EARLIEST <= value < LATEST:
        raise ValueError(f"not a time AWS writes (years {EARLIEST.year} to {LATEST.year - 1})")
    return value


# A time with its zone (one without cannot be set against the clock's) that AWS could have written.
AwsTime = Annotated[AwareDatetime, BeforeValidator(_written), AfterValidator(_in_range)]
