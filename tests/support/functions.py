"""Load a function's handler module by path, as Lambda does (every handler file is named app.py)."""

from __future__ import annotations

import importlib.util
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any
from unittest.mock import patch

import boto3

FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"


def load_function(name: str) -> ModuleType:
    module_name = f"nodecycle_function_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, FUNCTIONS / name / "app.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


@dataclass
class LambdaContext:
    """What handlers use of the Lambda context. Its remaining time counts down from ``remaining_millis``
    by ``clock`` (seconds), as Lambda's does towards the invocation's timeout: a handler that budgets its
    time sees it spent."""

    function_name: str = "nodecycle-test"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = "arn:aws:lambda:eu-west-1:123456789012:function:nodecycle-test"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    remaining_millis: int = 60_000
    clock: Callable[[], float] = time.monotonic
    started: float = field(init=False)

    def __post_init__(self) -> None:
        self.started = self.clock()

    def get_remaining_time_in_millis(self) -> int:
        return max(0, self.remaining_millis - int((self.clock() - self.started) * 1000))


class AwsLatency:
    """A clock (seconds) that moves ``per_call`` forward at each AWS API call made through boto3's default
    session (the adapters' clients), and only then: the time those calls would take against AWS, where moto
    answers in a millisecond, counted without sleeping. A context on it runs out as an invocation would."""

    def __init__(self, per_call: float) -> None:
        self.per_call = per_call
        self.operations: Counter[str] = Counter()  # calls by operation (DescribeInstances...)

    @property
    def calls(self) -> int:
        return self.operations.total()

    def __call__(self) -> float:
        return self.calls * self.per_call

    def _tick(self, model: Any, **_: Any) -> None:
        self.operations[model.name] += 1

    @contextmanager
    def counting(self) -> Iterator[None]:
        """Count the calls of the clients made while this is open: each copies its session's handlers when it
        is made, and counts as long as it lives (the adapters' clients: until the test's end). Meanwhile the
        invocation's own deadline, which cuts its AWS and Kubernetes calls (wiring.common.InvocationTime, on the
        monotonic clock), is on this clock too, as a context on it is: on the wall clock the calls were cut once
        moto's real time (seconds on a loaded machine) had used up what the context, on this clock, still had."""
        # (imported here: loading this module, as every function test does, must not load the wiring first)
        from nodecycle.wiring import common

        events = boto3._get_default_session().events
        events.register("before-call", self._tick, unique_id="tests.AwsLatency")
        try:
            with patch.object(common, "time", SimpleNamespace(monotonic=self)):
                yield
        finally:
            events.unregister("before-call", unique_id="tests.AwsLatency")
