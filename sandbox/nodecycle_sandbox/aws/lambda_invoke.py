"""Lambda's Invoke of the stack's functions, run by the runner as Lambda runs it.

moto holds the functions the runner registered (``runner/lambda_functions.py``) without their code: it answered
an invocation by trying Docker, so nothing ran (its error in the body). An invocation of a function the sandbox
runs now goes to the runner, as Lambda's does:

- Event (the runbook's sweep at once, ``aws lambda invoke --invocation-type Event``): the runner's asynchronous
  invocation, as an EventBridge rule's: Lambda's queue, its reserved concurrency (a function stopped at 0 sends it
  to its failure targets), its retries and its failure targets; the answer is AWS's, 202 with an empty body.
- RequestResponse (``aws lambda invoke`` without ``--invocation-type``, the AWS CLI's default): the function runs
  once, within its reserved concurrency, and the answer is 200 with what the handler returned (JSON); an
  unhandled error (or a timeout) is 200 too, with ``X-Amz-Function-Error: Unhandled`` and Lambda's error document
  (``errorMessage``, ``errorType``, ``requestId``, ``stackTrace``); an invocation beyond the reserved concurrency
  (every one at 0) is refused, 429 ``TooManyRequestsException`` (Reason
  ``ReservedFunctionConcurrentInvocationLimitExceeded``), the handler not run.

A function the runner does not run (none connected, or one made by hand) is moto's as before; an unknown function
is moto's ResourceNotFoundException, and a payload that is not JSON is refused as Lambda refuses it
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
# (function name, event) -> the synchronous invocation's answer, None: not a function the sandbox runs. Plain data
# (it crosses from the runner's process into the AWS one): {"payload": what the handler returned, "error": Lambda's
# error document of an unhandled error or None, "throttled": refused for the reserved concurrency}
SyncSink = Callable[[str, Any], "dict[str, Any] | None"]

_sink: Sink | None = None
_sync: SyncSink | None = None
_MARKER = "_nodecycle_async_invoke"
THROTTLE_REASON = "ReservedFunctionConcurrentInvocationLimitExceeded"


class TooManyRequests(LambdaClientError):
    code = 429

    def __init__(self) -> None:
        super().__init__("TooManyRequestsException", "Rate Exceeded.")
        # (Lambda's body names why: a reserved concurrency's limit, not the account's)
        self.description = json.dumps(
            {"__type": self.error_type, "message": self.message, "Reason": THROTTLE_REASON, "Type": "User"}
        )


def connect(sink: Sink | None, sync: SyncSink | None = None) -> None:
    """Where Event and RequestResponse invocations go (the runner, through the sandbox); None: moto's, as before."""
    global _sink, _sync
    _sink, _sync = sink, sync


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
        kind = headers.get("X-Amz-Invocation-Type") or "RequestResponse"
        sink, sync = _sink, _sync
        if (kind == "Event" and sink is None) or (kind == "RequestResponse" and sync is None):
            return original(self, function_name, qualifier, body, headers, response_headers)
        if kind not in ("Event", "RequestResponse"):  # (DryRun: moto's)
            return original(self, function_name, qualifier, body, headers, response_headers)
        function = self.get_function(function_name, qualifier)  # (an unknown one: ResourceNotFoundException)
        try:
            event = json.loads(body) if body else {}
        except ValueError:
            raise LambdaClientError(
                "InvalidRequestContentException", "Could not parse request body into json"
            ) from None
        if kind == "Event":
            assert sink is not None
            if not sink(function.function_name, event):
                return original(self, function_name, qualifier, body, headers, response_headers)
            response_headers["Content-Length"] = "0"
            return b""  # (202, empty: Lambda took the event into its queue)
        assert sync is not None
        answered = sync(function.function_name, event)
        if answered is None:
            return original(self, function_name, qualifier, body, headers, response_headers)
        if answered["throttled"]:
            raise TooManyRequests()
        response_headers["X-Amz-Executed-Version"] = "$LATEST"
        if answered["error"] is not None:
            response_headers["X-Amz-Function-Error"] = "Unhandled"
            return json.dumps(answered["error"]).encode()
        return json.dumps(answered["payload"]).encode()

    LambdaBackend.invoke = invoke  # type: ignore[method-assign]
    setattr(LambdaBackend, _MARKER, True)
