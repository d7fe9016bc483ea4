"""Time and metrics: what every part of the domain may use."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware (UTC)."""
        ...


class Metrics(Protocol):
    def count(self, name: str, value: float = 1, **dimensions: str) -> None: ...

    def seconds(self, name: str, value: float, **dimensions: str) -> None: ...
