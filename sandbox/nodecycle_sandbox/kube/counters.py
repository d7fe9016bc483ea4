"""Counts of API requests by (verb, resource), e.g. ("patch", "nodes") or ("create", "pods/eviction")."""

from __future__ import annotations

import threading
from collections import Counter


class Counters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, str]] = Counter()

    def add(self, verb: str, resource: str) -> None:
        with self._lock:
            self._counts[(verb, resource)] += 1

    def snapshot(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()
