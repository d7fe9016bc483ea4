"""One timer thread per emulation: lifecycle timeouts and refresh warm-ups are due at wall-clock times."""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

_log = logging.getLogger(__name__)


class Scheduler:
    """Runs callbacks at (or just after) their due time, in due order, on one daemon thread.

    A callback that raises is logged and does not stop the scheduler.
    """

    def __init__(self, name: str) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def call_at(self, when: float, callback: Callable[[], None]) -> None:
        with self._cond:
            heapq.heappush(self._heap, (when, next(self._seq), callback))
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._heap.clear()
            self._cond.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (not self._heap or self._heap[0][0] > time.time()):
                    timeout = None if not self._heap else self._heap[0][0] - time.time()
                    self._cond.wait(timeout)
                if self._closed:
                    return
                _, _, callback = heapq.heappop(self._heap)
            try:
                callback()
            except Exception:
                # One broken timer must not stop every other lifecycle: log it loudly and go on.
                _log.exception("sandbox timer callback failed")
