"""Lambda's asynchronous Invoke of the stack's functions, run by the runner as Lambda runs it.

The runbook runs a sweep at once with ``aws lambda invoke --function-name ... --invocation-type Event``. moto
holds the functions the runner registered (``runner/lambda_functions.py``) without their code: it answered 202
and tried Docker, so nothing ran (its error in the body, which AWS never sends for an Event invocation). An
Event invocation of a function the sandbox runs now goes to the runner's asynchronous invocation, as an
EventBridge rule's does: Lambda's queue, its reserved concurrency (a function stopped at 0 sends it to its
failure targets), its retries and its failure targets; the answer is AWS's, 202 with an empty body. A function
the runner does not run (none connected, or one made by hand) is moto's as before; an unknown function is
moto's ResourceNotFoundException, and a payload that is not JSON is refused as Lambda refuses it
(InvalidRequestContentException).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from moto.awslambda.exceptions import LambdaClientError
from moto.awslambda.models import LambdaBackend

# (function name, event) -> whether the sandbox runs that function and took the event
Sink = Callable[[str, Any], bool]

_sink: Sink | None = None
_MARKER = "_nodecycle_async_invoke"


def connect(sink: Sink | None) -> None:
    """Where Event invocations go (the runner, through the sandbox); None: moto's, as before."""
    global _sink
    _sink = sink


def install() -> None:
    if getattr(LambdaBackend, _MARKER, False):
        return
    original = LambdaBackend.invoke

    def invoke(
        self: LambdaBackend,
        function_name: str,
        qualifier: str | None,
        body: Any,
        headers: Any,
        response_headers: Any,
    ) -> str | bytes | None:
        sink = _sink
        if sink is None or headers.get("X-Amz-Invocation-Type") != "Event":
            return original(self, function_name, qualifier, body, headers, response_headers)
        function = self.get_function(function_name, qualifier)  # (an unknown one: ResourceNotFoundException)
        try:
            event = json.loads(body) if body else {}
        except ValueError:
            raise LambdaClientError(
                "InvalidRequestContentException", "Could not parse request body into json"
            ) from None
        if not sink(function.function_name, event):
            return original(self, function_name, qualifier, body, headers, response_headers)
        response_headers["Content-Length"] = "0"
        return b""  # (202, empty: Lambda took the event into its queue)

    LambdaBackend.invoke = invoke  # type: ignore[method-assign]
    setattr(LambdaBackend, _MARKER, True)
