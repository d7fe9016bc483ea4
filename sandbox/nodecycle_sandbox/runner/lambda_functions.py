"""The stack's functions as Lambda holds them, for operators' tools, and what an operator changes there.

CloudFormation creates each function (its role, timeout, memory, environment), its reserved concurrency, its
asynchronous invocation settings and its SQS event source mappings. The runner registers them with the sandbox's
Lambda (moto, which holds a function without Docker as long as nothing invokes it: the runner runs the handlers,
and ``aws/lambda_mappings.py`` keeps moto from running the mappings), all read from the template, so that the
runbook's ``aws lambda get-function-concurrency``, ``put-function-concurrency``, ``list-event-source-mappings``
and ``update-event-source-mapping`` work against the sandbox; and the runner asks Lambda before it delivers, so
that what an operator changes there matters: a function throttled to 0 by hand runs nothing (every delivery
is throttled, as Lambda's 429), a mapping disabled by hand polls nothing (its queue stalls), as on AWS.

Lambda applies such a change within seconds, not at once; the runner reads a function's concurrency again after
``REFRESH_SECONDS``, so that a delivery does not cost a call to Lambda. A mapping's state it does not read: the
sandbox's SQS gives the polls of a disabled mapping nothing (``aws/sqs_mapping_polls.py``), as each poll names its
mapping (``mapping_uuid``).
"""

from __future__ import annotations

import io
import json
import threading
import time
import zipfile
from collections.abc import Callable, Mapping
from typing import Any

from nodecycle_sandbox.runner.functions import FunctionSpec
from nodecycle_sandbox.runner.intrinsics import Intrinsics
from nodecycle_sandbox.runner.resources import SandboxResources

# Lambda's least MaximumConcurrency of an SQS mapping (CreateEventSourceMapping refuses less)
MIN_MAXIMUM_CONCURRENCY = 2

# The tag by which the sandbox's Lambda takes a mapping of a queue shorter than its function's timeout
# (aws/lambda_mappings.py's, spelled out here: the runner does not import moto)
SHORT_VISIBILITY_TAG = "nodecycle-sandbox:short-visibility"

REFRESH_SECONDS = 1.0
DEFAULT_RUNTIME = "python3.13"
# SAM's generated role, for a function without `Role`: Lambda may assume it.
_LAMBDA_TRUST = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}
    ],
}


def _placeholder_code() -> bytes:
    """The package Lambda holds: never run (the runner runs the function's code from its folder)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as package:
        package.writestr(
            "README", "The nodecycle sandbox's runner runs this function's code from its folder.\n"
        )
    return buffer.getvalue()


class MappingRefused(ValueError):
    """CreateEventSourceMapping's InvalidParameterValueException: CloudFormation fails the stack."""


def _check_batching(function: str, event: str, batch_size: int, window: float) -> None:
    """What Lambda refuses of an SQS mapping's batching (moto takes it): a standard queue's BatchSize is 1 to 10,000,
    and above 10 only with a MaximumBatchingWindowInSeconds (0 to 300) of at least 1 s."""
    if not 1 <= batch_size <= 10_000 or not 0 <= window <= 300:
        raise MappingRefused(
            f"{function}.{event}: BatchSize {batch_size} or batching window {window} s out of range"
        )
    if batch_size > 10 and window < 1:
        raise MappingRefused(
            f"{function}.{event}: Maximum batch window in seconds must be greater than 0 if maximum batch size is "
            "greater than 10"
        )


class _Answers:
    """Lambda's answers, each read again once older than ``REFRESH_SECONDS``."""

    def __init__(self, read: Callable[[str], Any]) -> None:
        self._read = read
        self._lock = threading.Lock()
        self._answers: dict[str, tuple[float, Any]] = {}

    def get(self, key: str) -> Any:
        now = time.monotonic()
        with self._lock:
            cached = self._answers.get(key)
        if cached is not None and now - cached[0] < REFRESH_SECONDS:
            return cached[1]
        value = self._read(key)  # (outside the lock: a call to Lambda)
        with self._lock:
            self._answers[key] = (now, value)
        return value


class LambdaFunctions:
    """Registers the functions and their mappings with Lambda; answers their reserved concurrency and whether a
    mapping is enabled, as Lambda has them now."""

    def __init__(
        self,
        template: Mapping[str, Any],
        *,
        intrinsics: Intrinsics,
        resources: SandboxResources,
        clients: Mapping[str, Any],
        min_values: bool = True,
    ) -> None:
        # False: time compressed (the sandbox's min_values): a function's queue may be shorter than its timeout
        self._min_values = min_values
        self._template = template
        self._intrinsics = intrinsics
        self._resources = resources
        self._lambda = clients["lambda"]
        self._iam = clients["iam"]
        self._names: dict[str, str] = {}  # logical id -> function name
        self._mappings: dict[tuple[str, str], str] = {}  # (function, event) -> the mapping's UUID
        self._concurrency = _Answers(self._read_concurrency)

    def deploy(self, functions: list[FunctionSpec]) -> None:
        globals_ = (self._template.get("Globals") or {}).get("Function") or {}
        for spec in functions:
            properties = {
                **globals_,
                **(self._template["Resources"][spec.logical_id].get("Properties") or {}),
            }
            self._create_function(spec, properties)
            self._names[spec.logical_id] = spec.name
            if spec.reserved_concurrency is not None:
                self._lambda.put_function_concurrency(
                    FunctionName=spec.name, ReservedConcurrentExecutions=spec.reserved_concurrency
                )
            if properties.get("EventInvokeConfig"):
                self._put_invoke_config(spec, self._intrinsics.resolve(properties["EventInvokeConfig"]))
            for trigger in spec.sqs:
                self._create_mapping(spec, trigger.name)

    def reserved(self, function: str) -> int | None:
        """The function's reserved concurrency in Lambda now (None: not reserved, or not registered here)."""
        if function not in self._names:
            return None
        value: int | None = self._concurrency.get(function)
        return value

    def mapping_uuid(self, function: str, event: str) -> str | None:
        """The UUID of the mapping of ``function``'s SQS ``event`` in Lambda (None: not registered here)."""
        return self._mappings.get((function, event))

    # -- what is created ----------------------------------------------------------------------------

    def _create_function(self, spec: FunctionSpec, properties: Mapping[str, Any]) -> None:
        request: dict[str, Any] = {
            "FunctionName": spec.name,
            "Runtime": str(self._intrinsics.resolve(properties.get("Runtime", DEFAULT_RUNTIME))),
            "Role": self._role(spec, properties),
            "Handler": str(self._intrinsics.resolve(properties["Handler"])),
            "Code": {"ZipFile": _placeholder_code()},
            "Timeout": int(spec.timeout),
            "MemorySize": spec.memory_mb,
            "Environment": {"Variables": dict(spec.environment)},
        }
        if properties.get("Description"):
            request["Description"] = str(self._intrinsics.resolve(properties["Description"]))
        if properties.get("Architectures"):
            request["Architectures"] = [str(a) for a in self._intrinsics.resolve(properties["Architectures"])]
        if spec.dead_letter_arn:
            request["DeadLetterConfig"] = {"TargetArn": spec.dead_letter_arn}
        # (Lambda checks it: subnets and security groups together, aws/lambda_vpc.py; AWS::NoValue resolves to None)
        vpc = self._intrinsics.resolve(properties.get("VpcConfig"))
        if vpc:
            request["VpcConfig"] = {
                key: [str(v) for v in vpc.get(key) or []] for key in ("SubnetIds", "SecurityGroupIds")
            }
        if not self._min_values and any(t.queue.visibility_timeout < spec.timeout for t in spec.sqs):
            # (Lambda refuses a mapping of a queue whose visibility timeout is shorter than the function's
            # timeout: a compressed sandbox's are, and the tag lets them be, see aws/lambda_mappings.py)
            request["Tags"] = {SHORT_VISIBILITY_TAG: "compressed time"}
        self._lambda.create_function(**request)

    def _role(self, spec: FunctionSpec, properties: Mapping[str, Any]) -> str:
        """The function's role, created in IAM when it is not there yet (two functions may share one): Lambda
        refuses a function whose role does not exist."""
        declared = properties.get("Role")
        role_id = f"{spec.logical_id}Role"
        if isinstance(declared, Mapping) and "Fn::GetAtt" in declared:
            role_id = str(declared["Fn::GetAtt"][0])
        arn = str(self._intrinsics.resolve(declared)) if declared else self._resources.role_arn(role_id)
        name = arn.rsplit("/", 1)[-1]
        role = self._template["Resources"].get(role_id) or {}
        trust = (role.get("Properties") or {}).get("AssumeRolePolicyDocument")
        try:
            self._iam.get_role(RoleName=name)
        except self._iam.exceptions.NoSuchEntityException:
            self._iam.create_role(
                RoleName=name,
                AssumeRolePolicyDocument=json.dumps(
                    self._intrinsics.resolve(trust) if trust else _LAMBDA_TRUST
                ),
            )
        return arn

    def _put_invoke_config(self, spec: FunctionSpec, config: Mapping[str, Any]) -> None:
        request: dict[str, Any] = {"FunctionName": spec.name}
        for key in ("MaximumRetryAttempts", "MaximumEventAgeInSeconds"):
            if key in config:
                request[key] = int(config[key])
        destinations = {
            outcome: {"Destination": str(target["Destination"])}
            for outcome, target in (config.get("DestinationConfig") or {}).items()
            if target and target.get("Destination")
        }
        if destinations:
            request["DestinationConfig"] = destinations
        self._lambda.put_function_event_invoke_config(**request)

    def _create_mapping(self, spec: FunctionSpec, event: str) -> None:
        """The mapping SAM makes of an SQS event: its settings as the template gives them (resolved)."""
        declared = self._template["Resources"][spec.logical_id]["Properties"]["Events"][event]
        properties: Mapping[str, Any] = self._intrinsics.resolve(declared.get("Properties") or {})
        trigger = next(t for t in spec.sqs if t.name == event)
        request: dict[str, Any] = {
            "FunctionName": spec.name,
            "EventSourceArn": trigger.queue.arn,
            "Enabled": trigger.enabled,
        }
        if "BatchSize" in properties:
            request["BatchSize"] = int(properties["BatchSize"])
        if "MaximumBatchingWindowInSeconds" in properties:
            request["MaximumBatchingWindowInSeconds"] = int(properties["MaximumBatchingWindowInSeconds"])
        _check_batching(spec.logical_id, event, trigger.batch_size, trigger.batching_window)
        if properties.get("FunctionResponseTypes"):
            request["FunctionResponseTypes"] = [str(t) for t in properties["FunctionResponseTypes"]]
        maximum = (properties.get("ScalingConfig") or {}).get("MaximumConcurrency")
        # Lambda refuses a MaximumConcurrency below 2, as the template's MinValue does; a sandbox told to accept
        # parameters below their MinValue (the benchmarks' one drain container) registers such a mapping without
        # it. The runner keeps the value it was given (functions.py): only what Lambda shows an operator differs.
        if maximum is not None and int(maximum) >= MIN_MAXIMUM_CONCURRENCY:
            request["ScalingConfig"] = {"MaximumConcurrency": int(maximum)}
        try:
            self._mappings[(spec.logical_id, event)] = self._lambda.create_event_source_mapping(**request)[
                "UUID"
            ]
        except self._lambda.exceptions.InvalidParameterValueException as refused:
            # (CloudFormation fails the stack with Lambda's message)
            raise MappingRefused(
                f"{spec.logical_id}.{event}: {refused.response['Error']['Message']}"
            ) from None

    # -- what Lambda says now -----------------------------------------------------------------------

    def _read_concurrency(self, function: str) -> int | None:
        try:
            answer = self._lambda.get_function_concurrency(FunctionName=self._names[function])
        except self._lambda.exceptions.ResourceNotFoundException:
            return 0  # a function deleted by hand runs nothing
        value = answer.get("ReservedConcurrentExecutions")
        return None if value is None else int(value)
