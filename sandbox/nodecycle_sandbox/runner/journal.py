"""Every invocation the runner made, for tests and benchmarks to assert on and to wait for."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nodecycle_sandbox.runner.invokers import InvocationResult


@dataclass(frozen=True)
class Invocation:
    function: str  # logical id
    source: str  # "sqs:<Queue>", "rule:<Event>", "schedule:<Event>" or "direct"
    request_id: str
    started_at: float
    finished_at: float
    ok: bool
    event: Any
    response: Any
    error: str | None
    # SQS: the batch's message ids and those that went back to the queue (reported or whole-batch failure).
    records: tuple[str, ...] = ()
    failures: tuple[str, ...] = ()
    api_calls: dict[str, int] = field(default_factory=dict)
    cold_start: bool = False
    init_error: bool = False  # the handler could not be loaded
    attempt: int = 1

    @property
    def duration(self) -> float:
        return self.finished_at - self.started_at

    @classmethod
    def of(cls, function: str, source: str, event: Any, result: InvocationResult, **more: Any) -> Invocation:
        """The journal entry of one invocation's result (``more``: the SQS records, the attempt)."""
        return cls(
            function=function,
            source=source,
            request_id=result.request_id,
            started_at=result.started_at,
            finished_at=result.finished_at,
            ok=result.ok,
            event=event,
            response=result.response,
            error=None if result.ok else f"{result.error_type}: {result.error_message}",
            api_calls=result.api_calls,
            cold_start=result.cold_start,
            init_error=result.init_error,
            **more,
        )


@dataclass(frozen=True)
class Throttle:
    """An invocation Lambda refused for the function's reserved concurrency (nothing ran), and what became of
    the work it carried."""

    function: str  # logical id
    source: str  # as an Invocation's
    at: float
    # "retry": Lambda tries again later; "returned": an SQS batch left to show again in its queue after the
    # visibility timeout; "expired": an asynchronous event past its maximum age, sent to its failure targets.
    outcome: str
    records: tuple[str, ...] = ()  # SQS: the batch's message ids


class Journal:
    def __init__(self) -> None:
        self._entries: list[Invocation] = []
        self._throttles: list[Throttle] = []
        self._cond = threading.Condition()

    def clear(self) -> None:
        """Forget what was recorded so far (a long-running sandbox that starts another chapter)."""
        with self._cond:
            self._entries.clear()
            self._throttles.clear()

    def record_throttle(self, throttle: Throttle) -> None:
        with self._cond:
            self._throttles.append(throttle)
            self._cond.notify_all()

    def throttles(self, function: str | None = None, source: str | None = None) -> list[Throttle]:
        with self._cond:
            return [
                t
                for t in self._throttles
                if (function is None or t.function == function) and (source is None or t.source == source)
            ]

    def record(self, invocation: Invocation) -> None:
        with self._cond:
            self._entries.append(invocation)
            self._cond.notify_all()

    def invocations(self, function: str | None = None, source: str | None = None) -> list[Invocation]:
        with self._cond:
            return [
                i
                for i in self._entries
                if (function is None or i.function == function) and (source is None or i.source == source)
            ]

    def api_calls(self, function: str | None = None) -> Counter[str]:
        """AWS API calls made by handlers, "service.Operation" -> count."""
        total: Counter[str] = Counter()
        for invocation in self.invocations(function):
            total.update(invocation.api_calls)
        return total

    def wait_until(self, predicate: Callable[[], Any], timeout: float, *, poll: float = 0.05) -> Any:
        """Wait until `predicate()` is truthy and return its value.

        Re-checked on every new invocation and every `poll` seconds (for conditions outside the journal);
        raises TimeoutError after `timeout` seconds.
        """
        deadline = time.monotonic() + timeout
        while True:
            seen = len(self._entries)
            # Outside the lock: a predicate may call AWS or Kubernetes while handlers keep recording.
            value = predicate()
            if value:
                return value
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"condition not met within {timeout} s")
            with self._cond:
                if len(self._entries) == seen:
                    self._cond.wait(min(poll, remaining))
