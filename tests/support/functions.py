"""Load a function's handler module by path, as Lambda does (every handler file is named app.py)."""

from __future__ import annotations

import importlib.util
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

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
    """What handlers use of the Lambda context."""

    function_name: str = "nodecycle-test"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = "arn:aws:lambda:eu-west-1:123456789012:function:nodecycle-test"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    remaining_millis: int = 60_000

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_millis
