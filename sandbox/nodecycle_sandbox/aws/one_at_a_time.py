"""Operations of a moto backend made to run one at a time under a lock, as the service decides them: moto's
server serves each request on its own thread, and its backends' models are not written for that (see
``sqs_timing`` and ``dynamodb_transactions``)."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from functools import wraps
from typing import Any


def one_at_a_time(backend: type, operations: Iterable[str], lock: threading.RLock) -> None:
    """Replace each of ``backend``'s ``operations`` by the same under ``lock``."""
    for name in operations:
        operation = getattr(backend, name)

        def under_lock(*args: Any, _operation: Any = operation, **kwargs: Any) -> Any:
            with lock:
                return _operation(*args, **kwargs)

        setattr(backend, name, wraps(operation)(under_lock))
