"""Lambda's SQS event source mappings are the runner's to run, never moto's.

The runner registers the stack's functions and mappings with moto's Lambda (``runner/lambda_functions.py``) so
that operators' commands find them, and runs the mappings itself (``runner/sqs_source.py``). moto, given an
enabled mapping of a queue, receives a batch of that queue at each message sent to it and invokes the function
in Docker: without Docker the invocation fails and moto makes the batch visible again, its receive counted
towards the queue's ``maxReceiveCount``, so that every message would reach the dead-letter queue before the
runner saw it. Here a queue keeps no mapping for moto to run: moto's Lambda still holds each mapping (list, get,
update, delete answer as on AWS).

Lambda refuses what would deliver a batch twice while it runs: an SQS mapping whose queue's visibility timeout
is shorter than the function's timeout (CreateEventSourceMapping), and a function's timeout raised past the
visibility timeout of a queue it is mapped to (UpdateFunctionConfiguration), both InvalidParameterValueException
"Queue visibility timeout: 30 seconds is less than Function timeout: 60 seconds". moto took both. A sandbox
that compresses time (``SandboxOptions.min_values`` False: a 5 s visibility timeout for functions of 60 s) has
its runner tag such a function with ``SHORT_VISIBILITY_TAG``: its mappings are taken, as the sandbox allows
what AWS forbids for speed.

Lambda also refuses, at a mapping's creation and update, settings of an SQS mapping moto took: FunctionResponseTypes
outside its enum (a misspelt ReportBatchItemFailures would have the runner delete a batch's failed messages),
a MaximumConcurrency above 1000, and a batch over 10 without a batching window of at least 1 s.
"""

from __future__ import annotations

from typing import Any

from moto.awslambda.exceptions import InvalidParameterValueException, ValidationException
from moto.awslambda.models import LambdaBackend
from moto.sqs.models import Queue, sqs_backends

_MARKER = "_nodecycle_visibility_checked"
# A function's tag by which the runner of a time-compressed sandbox lets its queues be shorter than its timeout
SHORT_VISIBILITY_TAG = "nodecycle-sandbox:short-visibility"
_RESPONSE_TYPES = ("ReportBatchItemFailures",)
MAX_MAXIMUM_CONCURRENCY = 1000


def _no_mappings(self: Queue) -> dict[str, Any]:
    return {}  # (a fresh dict: what moto writes into it is forgotten)


def _forget(self: Queue, value: dict[str, Any]) -> None:
    """moto's Queue sets its dict of mappings at creation."""


def _visibility(backend: LambdaBackend, arn: str) -> int | None:
    """The visibility timeout of the SQS queue ``arn`` (None: not a queue of this account and region)."""
    for queue in sqs_backends[backend.account_id][backend.region_name].queues.values():
        if queue.queue_arn == arn:
            # (moto sets each attribute of a queue as a Python attribute of the same name, snake-cased)
            return int(getattr(queue, "visibility_timeout"))  # noqa: B009
    return None


def _refuse_shorter(visibility: int | None, timeout: int, function: Any) -> None:
    if SHORT_VISIBILITY_TAG in (function.tags or {}):
        return
    if visibility is not None and visibility < timeout:
        raise InvalidParameterValueException(
            f"Queue visibility timeout: {visibility} seconds is less than Function timeout: {timeout} seconds"
        )


def _refuse_settings(source_arn: str, spec: dict[str, Any], batch_size: Any, window: Any) -> None:
    """What Lambda refuses of an SQS mapping's settings, moto took: FunctionResponseTypes outside its enum,
    ScalingConfig.MaximumConcurrency above 1000 (botocore's lambda model; a client checks only the least, 2), and a
    batch over 10 without a batching window of at least 1 s (``batch_size`` and ``window`` as they will be)."""
    if ":sqs:" not in source_arn:
        return
    types = spec.get("FunctionResponseTypes")
    if types is not None and any(t not in _RESPONSE_TYPES for t in types):
        raise ValidationException(
            str(types),
            "functionResponseTypes",
            f"Member must satisfy constraint: [Member must satisfy enum value set: [{', '.join(_RESPONSE_TYPES)}]]",
        )
    maximum = (spec.get("ScalingConfig") or {}).get("MaximumConcurrency")
    if maximum is not None and int(maximum) > MAX_MAXIMUM_CONCURRENCY:
        raise ValidationException(
            str(maximum),
            "scalingConfig.maximumConcurrency",
            f"Member must have value less than or equal to {MAX_MAXIMUM_CONCURRENCY}",
        )
    if int(batch_size if batch_size is not None else 10) > 10 and float(window or 0) < 1:
        raise InvalidParameterValueException(
            "Maximum batch window in seconds must be greater than 0 if maximum batch size is greater than 10"
        )


def install() -> None:
    Queue.lambda_event_source_mappings = property(_no_mappings, _forget)  # type: ignore[assignment]
    if getattr(LambdaBackend, _MARKER, False):
        return
    create, update = LambdaBackend.create_event_source_mapping, LambdaBackend.update_function_configuration
    update_mapping = LambdaBackend.update_event_source_mapping

    def create_event_source_mapping(self: LambdaBackend, spec: dict[str, Any]) -> Any:
        if spec.get("FunctionName") and spec.get("EventSourceArn"):
            function = self._lambdas.get_function_by_name_or_arn_with_qualifier(spec["FunctionName"])
            _refuse_shorter(_visibility(self, str(spec["EventSourceArn"])), int(function.timeout), function)
            _refuse_settings(
                str(spec["EventSourceArn"]),
                spec,
                spec.get("BatchSize"),
                spec.get("MaximumBatchingWindowInSeconds"),
            )
        return create(self, spec)

    def update_event_source_mapping(self: LambdaBackend, uuid: str, spec: dict[str, Any]) -> Any:
        mapping = self.get_event_source_mapping(uuid)
        if mapping is not None:
            _refuse_settings(
                str(mapping.event_source_arn),
                spec,
                spec.get("BatchSize", mapping.batch_size),
                spec.get("MaximumBatchingWindowInSeconds", mapping.max_batch_window),
            )
        return update_mapping(self, uuid, spec)

    def update_function_configuration(
        self: LambdaBackend, function_name: str, qualifier: str, body: dict[str, Any]
    ) -> Any:
        if "Timeout" in body:
            function = self.get_function(function_name, qualifier)
            for mapping in list(self._event_source_mappings.values()):
                if mapping.function_arn == function.function_arn:
                    _refuse_shorter(
                        _visibility(self, str(mapping.event_source_arn)), int(body["Timeout"]), function
                    )
        return update(self, function_name, qualifier, body)

    LambdaBackend.create_event_source_mapping = create_event_source_mapping  # type: ignore[method-assign]
    LambdaBackend.update_event_source_mapping = update_event_source_mapping  # type: ignore[method-assign]
    LambdaBackend.update_function_configuration = update_function_configuration  # type: ignore[method-assign]
    setattr(LambdaBackend, _MARKER, True)
