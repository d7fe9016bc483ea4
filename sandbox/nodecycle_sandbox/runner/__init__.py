"""The Lambda-like runner: template -> queues, table and functions; SQS, EventBridge and schedule triggers.

Exports are lazy so that a worker process (`python -m nodecycle_sandbox.runner.worker`) imports only what
a Lambda container would, not boto3 and the whole runner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nodecycle_sandbox.runner.journal import Invocation, Journal
    from nodecycle_sandbox.runner.runner import Runner

__all__ = ["Invocation", "Journal", "Runner"]


def __getattr__(name: str) -> Any:
    if name == "Runner":
        from nodecycle_sandbox.runner.runner import Runner

        return Runner
    if name in ("Invocation", "Journal"):
        from nodecycle_sandbox.runner import journal

        return getattr(journal, name)
    raise AttributeError(name)
