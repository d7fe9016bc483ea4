"""Load a handler file and call it as the Lambda Python runtime does; shared by both invokers."""

from __future__ import annotations

import importlib.util
import json
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

Handler = Callable[[Any, Any], Any]


def load_handler(handler_file: Path, module_name: str, handler_name: str) -> Handler:
    """Import `handler_file` under `module_name` (every function's file is app.py) and return the handler."""
    spec = importlib.util.spec_from_file_location(module_name, handler_file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {handler_file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    handler: Handler = getattr(module, handler_name)
    return handler


def call_handler(handler: Handler, event: Any, context: Any) -> dict[str, Any]:
    """The outcome as plain JSON data: {"ok": True, "response": ...} or {"ok": False, "errorType", ...}."""
    try:
        # Lambda returns the response as JSON; one that does not serialize fails the invocation. What its
        # callers (an event source mapping reading a partial batch response) see is that JSON: a tuple as an
        # array, a key as a string, in an inline sandbox as in a worker process.
        response = json.loads(json.dumps(handler(event, context)))
    except Exception as error:
        return error_outcome(error)
    return {"ok": True, "response": response}


def error_outcome(error: BaseException) -> dict[str, Any]:
    return {
        "ok": False,
        "errorType": type(error).__name__,
        "errorMessage": str(error),
        "stackTrace": traceback.format_exception(error),
    }
