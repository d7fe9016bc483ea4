"""Counts of API requests by (verb, resource), e.g. ("patch", "nodes") or ("create", "pods/eviction"), and the
bytes of their bodies: received (the request's) and sent (the response's, as written on the wire).

A request is counted when the router knows what it is; the transport reports the response's size after
writing it, on the same thread (each connection has its own thread and serves its requests one at a time),
so the two meet through a thread-local. A request refused before it was routed (401, a bad path) counts its
bytes under ("unrouted", "").
"""

from __future__ import annotations

import threading
from collections import Counter

UNROUTED = ("unrouted", "")


class Counters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, str]] = Counter()
        self._sent: Counter[tuple[str, str]] = Counter()
        self._received: Counter[tuple[str, str]] = Counter()
        self._current = threading.local()

    def begin(self, received: int) -> None:
        """A request with a body of ``received`` bytes arrived on this thread."""
        self._current.key = UNROUTED
        self._current.received = received

    def add(self, verb: str, resource: str) -> None:
        key = (verb, resource)
        with self._lock:
            self._counts[key] += 1
        self._current.key = key

    def add_bytes(self, *, sent: int) -> None:
        """The response to this thread's request was ``sent`` bytes."""
        key = getattr(self._current, "key", UNROUTED)
        received = getattr(self._current, "received", 0)
        with self._lock:
            self._sent[key] += sent
            self._received[key] += received
        self._current.key, self._current.received = UNROUTED, 0

    def snapshot(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)

    def bytes_sent(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._sent)

    def bytes_received(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._received)

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()
            self._sent.clear()
            self._received.clear()
