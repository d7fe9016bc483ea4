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


def lead(response: Any, received: float) -> timedelta:
    """How far the reader's clock (``received``: when ``response`` came, on it) runs ahead of the API server's, as
    the answer's Date tells it; none when within CLOCK_TOLERANCE, or not told (no Date, or one unreadable)."""
    headers = getattr(response, "headers", None) or {}
    try:
        date = parsedate_to_datetime(str(headers.get("Date")))
    except (TypeError, ValueError):
        return timedelta(0)
    if date.tzinfo is None:
        return timedelta(0)
    ahead = timedelta(seconds=received - date.timestamp())
    return ahead if abs(ahead) > CLOCK_TOLERANCE else timedelta(0)


def on_reader_clock(stamp: datetime | None, ahead: timedelta) -> datetime | None:
    """``stamp`` (on the API server's clock) on the reader's, which runs ``ahead`` of it."""
    return None if stamp is None else stamp + ahead
