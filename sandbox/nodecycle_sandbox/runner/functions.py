"""The template's functions as the runner needs them: code, settings, environment and triggers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodecycle_sandbox.runner.intrinsics import Intrinsics
from nodecycle_sandbox.runner.resources import QueueInfo, SandboxResources
from nodecycle_sandbox.schedule_expressions import interval_seconds

DEFAULT_TIMEOUT = 3
DEFAULT_MEMORY = 128
DEFAULT_ASYNC_RETRIES = 2
DEFAULT_MAX_EVENT_AGE = 21600  # seconds: Lambda keeps an asynchronous event up to 6 hours by default


@dataclass(frozen=True)
class SqsTrigger:
    name: str
    queue: QueueInfo
    batch_size: int
    batching_window: float
    report_failures: bool
    max_concurrency: int | None
    enabled: bool


@dataclass(frozen=True)
class RuleTrigger:
    name: str
    pattern: dict[str, Any]


@dataclass(frozen=True)
class ScheduleTrigger:
    name: str
    expression: str
    # None for cron expressions: those fire only on demand in the sandbox.
    interval: float | None
    enabled: bool
    input: str | None


@dataclass(frozen=True)
class FunctionSpec:
    logical_id: str
    name: str
    arn: str
    code_dir: Path
    handler_file: Path
    handler_name: str
    timeout: float
    memory_mb: int
    environment: dict[str, str]
    layer_dirs: tuple[Path, ...] = ()
    sqs: tuple[SqsTrigger, ...] = ()
    rules: tuple[RuleTrigger, ...] = ()
    schedules: tuple[ScheduleTrigger, ...] = ()
    async_retries: int = DEFAULT_ASYNC_RETRIES
    max_event_age: float = DEFAULT_MAX_EVENT_AGE  # EventInvokeConfig MaximumEventAgeInSeconds (AWS seconds)
    # ReservedConcurrentExecutions: its executions in flight across all its sources; None: not reserved.
    reserved_concurrency: int | None = None
    # Where a failed asynchronous event goes: DeadLetterQueue or EventInvokeConfig OnFailure (SQS ARNs).
    dead_letter_arn: str | None = None
    on_failure_arn: str | None = None
    # LoggingConfig.LogGroup: the group Lambda sends the function's output to; None: /aws/lambda/<name>
    logging_group: str | None = None

    @property
    def log_group(self) -> str:
        return self.logging_group or f"/aws/lambda/{self.name}"

    @property
    def module_name(self) -> str:
        # Every handler file is app.py: each needs its own module name in a shared interpreter.
        return f"nodecycle_sandbox_fn_{self.logical_id}"


def read_functions(
    template: Mapping[str, Any],
    *,
    root: Path,
    intrinsics: Intrinsics,
    resources: SandboxResources,
    region: str,
    account: str,
) -> list[FunctionSpec]:
    """Every `AWS::Serverless::Function` whose condition holds, with Globals merged in and values resolved."""
    globals_ = (template.get("Globals") or {}).get("Function") or {}
    all_resources: Mapping[str, Any] = template["Resources"]
    layers = {
        logical_id: root / str(intrinsics.resolve(resource["Properties"]["ContentUri"]))
        for logical_id, resource in all_resources.items()
        if resource["Type"] in ("AWS::Serverless::LayerVersion", "AWS::Lambda::LayerVersion")
        and "ContentUri" in (resource.get("Properties") or {})
    }
    specs = []
    for logical_id, resource in all_resources.items():
        if resource["Type"] != "AWS::Serverless::Function" or not resources.exists(logical_id):
            continue
        properties = {**globals_, **(resource.get("Properties") or {})}
        environment = {
            **((globals_.get("Environment") or {}).get("Variables") or {}),
            **(((resource.get("Properties") or {}).get("Environment") or {}).get("Variables") or {}),
        }
        resolved_env = intrinsics.resolve(environment) or {}
        name = resources.function_name(logical_id)
        code_dir = root / str(intrinsics.resolve(properties["CodeUri"]))
        module, _, handler_name = str(intrinsics.resolve(properties["Handler"])).rpartition(".")
        layer_dirs = tuple(
            layers[ref["Ref"]]
            for ref in properties.get("Layers") or []
            if isinstance(ref, dict) and ref.get("Ref") in layers
        )
        invoke_config = properties.get("EventInvokeConfig") or {}
        on_failure = ((invoke_config.get("DestinationConfig") or {}).get("OnFailure") or {}).get(
            "Destination"
        )
        dead_letter = (properties.get("DeadLetterQueue") or {}).get("TargetArn")
        log_group = (properties.get("LoggingConfig") or {}).get("LogGroup")
        triggers = _triggers(
            resource.get("Properties", {}).get("Events") or {}, intrinsics, resources, logical_id
        )
        specs.append(
            FunctionSpec(
                logical_id=logical_id,
                name=name,
                arn=f"arn:aws:lambda:{region}:{account}:function:{name}",
                code_dir=code_dir,
                handler_file=code_dir / (module.replace(".", "/") + ".py"),
                handler_name=handler_name,
                timeout=float(intrinsics.resolve(properties.get("Timeout", DEFAULT_TIMEOUT))),
                memory_mb=int(intrinsics.resolve(properties.get("MemorySize", DEFAULT_MEMORY))),
                environment={k: _env_string(v) for k, v in resolved_env.items()},
                layer_dirs=layer_dirs,
                sqs=tuple(t for t in triggers if isinstance(t, SqsTrigger)),
                rules=tuple(t for t in triggers if isinstance(t, RuleTrigger)),
                schedules=tuple(t for t in triggers if isinstance(t, ScheduleTrigger)),
                async_retries=int(
                    intrinsics.resolve(invoke_config.get("MaximumRetryAttempts", DEFAULT_ASYNC_RETRIES))
                ),
                max_event_age=float(
                    intrinsics.resolve(invoke_config.get("MaximumEventAgeInSeconds", DEFAULT_MAX_EVENT_AGE))
                ),
                reserved_concurrency=int(intrinsics.resolve(properties["ReservedConcurrentExecutions"]))
                if "ReservedConcurrentExecutions" in properties
                else None,
                dead_letter_arn=intrinsics.resolve(dead_letter) if dead_letter else None,
                on_failure_arn=intrinsics.resolve(on_failure) if on_failure else None,
                logging_group=str(intrinsics.resolve(log_group)) if log_group else None,
            )
        )
    return specs


def _triggers(
    events: Mapping[str, Any], intrinsics: Intrinsics, resources: SandboxResources, function: str
) -> list[SqsTrigger | RuleTrigger | ScheduleTrigger]:
    triggers: list[SqsTrigger | RuleTrigger | ScheduleTrigger] = []
    for name, event in events.items():
        kind = event["Type"]
        properties = event.get("Properties") or {}
        if kind == "SQS":
            queue_ref = properties["Queue"]
            if not (isinstance(queue_ref, dict) and "Fn::GetAtt" in queue_ref):
                raise ValueError(f"{function}.{name}: the sandbox needs Queue: !GetAtt <Queue>.Arn")
            logical_id = queue_ref["Fn::GetAtt"][0]
            resolved = intrinsics.resolve(properties)
            scaling = resolved.get("ScalingConfig") or {}
            triggers.append(
                SqsTrigger(
                    name=name,
                    queue=resources.queue(logical_id),
                    batch_size=int(resolved.get("BatchSize", 10)),
                    batching_window=float(resolved.get("MaximumBatchingWindowInSeconds", 0)),
                    report_failures="ReportBatchItemFailures"
                    in (resolved.get("FunctionResponseTypes") or []),
                    max_concurrency=int(scaling["MaximumConcurrency"])
                    if "MaximumConcurrency" in scaling
                    else None,
                    enabled=_bool(resolved.get("Enabled", True)),
                )
            )
        elif kind in ("EventBridgeRule", "CloudWatchEvent"):
            triggers.append(RuleTrigger(name=name, pattern=intrinsics.resolve(properties["Pattern"])))
        elif kind in ("Schedule", "ScheduleV2"):
            resolved = intrinsics.resolve(properties)
            expression = str(resolved.get("Schedule") or resolved.get("ScheduleExpression"))
            state = resolved.get("State")
            enabled = _bool(resolved.get("Enabled", True)) and state != "DISABLED"
            triggers.append(
                ScheduleTrigger(
                    name=name,
                    expression=expression,
                    interval=rate_seconds(expression),
                    enabled=enabled,
                    input=resolved.get("Input"),
                )
            )
        else:
            raise ValueError(f"{function}.{name}: the sandbox does not run {kind} events")
    return triggers


def rate_seconds(expression: str) -> float | None:
    """A rate's interval in seconds, None for a cron expression; an expression EventBridge refuses raises
    ``ValueError`` (``InvalidScheduleExpression``), as PutRule fails the stack with it."""
    return interval_seconds(expression)


def _bool(value: Any) -> bool:
    return value is True or str(value).lower() == "true"


def _env_string(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
