"""Lambda's SQS event source mappings are the runner's to run, never moto's.

The runner registers the stack's functions and mappings with moto's Lambda (``runner/lambda_functions.py``) so
that operators' commands find them, and runs the mappings itself (``runner/sqs_source.py``). moto, given an
enabled mapping of a queue, receives a batch of that queue at each message sent to it and invokes the function
in Docker: without Docker the invocation fails and moto makes the batch visible again, its receive counted
towards the queue's ``maxReceiveCount``, so that every message would reach the dead-letter queue before the
runner saw it. Here a queue keeps no mapping for moto to run: moto's Lambda still holds each mapping (list, get,
update, delete answer as on AWS).
"""

from __future__ import annotations

from typing import Any

from moto.sqs.models import Queue


def _no_mappings(self: Queue) -> dict[str, Any]:
    return {}  # (a fresh dict: what moto writes into it is forgotten)


def _forget(self: Queue, value: dict[str, Any]) -> None:
    """moto's Queue sets its dict of mappings at creation."""


def install() -> None:
    Queue.lambda_event_source_mappings = property(_no_mappings, _forget)  # type: ignore[assignment]
