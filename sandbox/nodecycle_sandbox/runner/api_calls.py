"""Count the AWS API calls a handler makes, by service and operation, in whichever process it runs."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_local = threading.local()
# In a worker process everything is the handler's, including threads it starts: count process-wide there.
_process_counter: Counter[str] | None = None
_installed = False
_install_lock = threading.Lock()


def install() -> None:
    """Wrap botocore's one funnel for API calls. Calls count inside `counting()` on the same thread (so the
    runner's own polling in the same process does not count), or anywhere while process-wide counting is on."""
    global _installed
    with _install_lock:
        if _installed:
            return
        from botocore.client import BaseClient

        original = BaseClient._make_api_call  # type: ignore[attr-defined]

        def _make_api_call(self: Any, operation_name: str, api_params: Any) -> Any:
            counter: Counter[str] | None = getattr(_local, "counter", None)
            if counter is None:
                counter = _process_counter
            if counter is not None:
                counter[f"{self.meta.service_model.service_name}.{operation_name}"] += 1
            return original(self, operation_name, api_params)

        BaseClient._make_api_call = _make_api_call  # type: ignore[attr-defined]
        _installed = True


@contextmanager
def counting(*, process_wide: bool = False) -> Iterator[Counter[str]]:
    global _process_counter
    install()
    counter: Counter[str] = Counter()
    if process_wide:
        _process_counter = counter
    else:
        _local.counter = counter
    try:
        yield counter
    finally:
        if process_wide:
            _process_counter = None
        else:
            _local.counter = None
