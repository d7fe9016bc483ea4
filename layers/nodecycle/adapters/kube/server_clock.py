"""How far the reader's clock runs ahead of the API server's, as an answer tells it (its Date header, which
kube-apiserver sends with every answer): the Kubernetes objects' stamps (a pod's deletionTimestamp) are on the API
server's clock, the steps' ``now`` on the function's, which the sandbox's clock-skew fault (and a container's
clock, off) can put a minute apart."""

from __future__ import annotations

from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

# A lead the Date cannot tell from none (it is to the second, and stamped before the answer went out): taken as none,
# so that a function on time reads the stamps as the API server wrote them (as the budget's stores do).
CLOCK_TOLERANCE = timedelta(seconds=2)


def server_date(headers: Any) -> datetime | None:
    """The API server's time of an answer, as its ``headers``' Date tells it (to the second, stamped before the answer
    went out); None when not told (no Date, or one unreadable or without its zone). The one reading of it: the drain's
    reads and the budget's store (adapters/kube/budget.py) both take the API server's clock from here."""
    try:
        date = parsedate_to_datetime(str((headers or {}).get("Date")))
    except (TypeError, ValueError):
        return None
    return date if date.tzinfo is not None else None


def lead(response: Any, received: float) -> timedelta:
    """How far the reader's clock (``received``: when ``response`` came, on it) runs ahead of the API server's, as
    the answer's Date tells it; none when within CLOCK_TOLERANCE, or not told (no Date, or one unreadable)."""
    date = server_date(getattr(response, "headers", None))
    if date is None:
        return timedelta(0)
    ahead = timedelta(seconds=received - date.timestamp())
    return ahead if abs(ahead) > CLOCK_TOLERANCE else timedelta(0)


def on_reader_clock(stamp: datetime | None, ahead: timedelta) -> datetime | None:
    """``stamp`` (on the API server's clock) on the reader's, which runs ``ahead`` of it."""
    return None if stamp is None else stamp + ahead
