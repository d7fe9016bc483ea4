"""The Lambda-like runner: deploys the template's queues and table, and delivers work to the handlers as
Lambda would (SQS event source mappings, EventBridge rules, schedules), inline or in worker processes."""

from __future__ import annotations

import functools
import hashlib
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

import boto3
from botocore.config import Config

from nodecycle_sandbox.faults import RUNNER_AGENT
from nodecycle_sandbox.iam.policy import PolicyError
from nodecycle_sandbox.iam.template import access_entries, function_role, template_roles
from nodecycle_sandbox.runner.async_invoke import AsyncInvoker
from nodecycle_sandbox.runner.cfn_yaml import load_template
from nodecycle_sandbox.runner.concurrency import THROTTLE_TIME_SCALE, ReservedConcurrency, throttled_result
from nodecycle_sandbox.runner.context import lambda_environment
from nodecycle_sandbox.runner.faults import RunnerFaults
from nodecycle_sandbox.runner.function_logs import FunctionLogs, creates_its_group
from nodecycle_sandbox.runner.functions import FunctionSpec, SqsTrigger, read_functions
from nodecycle_sandbox.runner.intrinsics import Intrinsics, check_rules
from nodecycle_sandbox.runner.invokers import InlineInvoker, InvocationResult, Invoker, ProcessInvoker
from nodecycle_sandbox.runner.journal import Invocation, Journal, Throttle
from nodecycle_sandbox.runner.lambda_functions import LambdaFunctions
from nodecycle_sandbox.runner.patterns import matches
from nodecycle_sandbox.runner.resources import QueueInfo, SandboxResources, TableInfo
from nodecycle_sandbox.runner.rule_targets import RuleTargets
from nodecycle_sandbox.runner.schedules import Schedules
from nodecycle_sandbox.runner.sqs_source import SqsEventSource
from nodecycle_sandbox.runner.stack import StackDeployment

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient

# Registers roles ({"arn", "trust", "policies"}) and the keys that act as them with the AWS side.
IdentityRegistry = Callable[[list[dict[str, Any]], list[dict[str, str]]], None]

SANDBOX_ACCOUNT = "123456789012"
SANDBOX_SECRET_KEY = "sandbox-secret-access-key"
RUNNER_ACCESS_KEY = "AKIASANDBOXRUNNER000"  # the runner's own deployment work: the account's administrator
# Lambda's concurrency for an SQS mapping without ScalingConfig is the account's; the sandbox caps it.
DEFAULT_SQS_CONCURRENCY = 5
# Asynchronous invocations (EventBridge rules, schedules) in flight at once per function, by default. Lambda
# runs them with the function's concurrency; the sandbox keeps few worker processes unless told otherwise.
ASYNC_CONCURRENCY = 2
STOP_GRACE_SECONDS = 10.0
# How long an event source mapping's poller waits in each long poll: Lambda's 20 s, the longest SQS allows (an idle
# mapping costs a few receives a minute, not several a second). A disable in Lambda is taken by the polls under way
# (aws/sqs_mapping_polls.py), and a stop ends them (`SqsEventSource.end_polls`): neither waits for them.
LAMBDA_POLL_WAIT_SECONDS = 20
SYNC_INVOKE = "invoke:sync"  # the journal's source of an operator's RequestResponse invocation


class Runner:
    """Runs the functions of a SAM template against the sandbox's AWS endpoint.

    mode "process" (default): each function has warm worker processes, up to its concurrency.
    mode "inline": handlers run in this process, one invocation at a time (fast, deterministic tests).
    """

    def __init__(
        self,
        *,
        template: Path,
        endpoint_url: str,
        region: str,
        account: str = SANDBOX_ACCOUNT,
        root: Path | None = None,
        stack_name: str = "nodecycle",
        parameters: Mapping[str, str] | None = None,
        environment: Mapping[str, str] | None = None,
        mode: Literal["process", "inline"] = "process",
        default_concurrency: int = DEFAULT_SQS_CONCURRENCY,
        concurrency_cap: int | None = None,
        min_values: bool = True,
        poll_wait: int = LAMBDA_POLL_WAIT_SECONDS,
        async_retry_delays: tuple[float, ...] = (1.0, 2.0),
        async_concurrency: int = ASYNC_CONCURRENCY,
        schedule_interval: float | None = None,
        schedules_enabled: bool = True,
        sqs_sources_enabled: bool = True,
        log_dir: Path | None = None,
        identities: IdentityRegistry | None = None,
        layer_dir: Path | None = None,
        faults: RunnerFaults | None = None,
        throttle_scale: float = THROTTLE_TIME_SCALE,
    ) -> None:
        self.template_path = template
        # Another copy of the layer's code for the handlers (e.g. a deliberately broken one, to check that
        # the tests catch it); None: the template's ContentUri.
        self._layer_dir = layer_dir
        self.faults = faults or RunnerFaults()
        self.endpoint_url = endpoint_url
        self.region = region
        self.account = account
        self.root = root or template.parent
        self.stack_name = stack_name
        self.mode = mode
        self.journal = Journal()
        self._parameters = dict(parameters or {})
        self._overrides = dict(environment or {})
        self._default_concurrency = default_concurrency
        # Like an account's concurrency limit: no SQS mapping gets more pollers (and containers) than this.
        self._concurrency_cap = concurrency_cap
        self._min_values = min_values  # False: parameters below their MinValue are accepted (see Intrinsics)
        self._poll_wait = poll_wait
        self._async_retry_delays = async_retry_delays
        self._async_concurrency = async_concurrency
        # Lambda's throttle back-off and event age, compressed (concurrency.py)
        self._throttle_scale = throttle_scale
        self._reserved = ReservedConcurrency({})
        self._schedule_interval = schedule_interval
        self._schedules_enabled = schedules_enabled
        self._sqs_sources_enabled = sqs_sources_enabled
        self._log_dir = log_dir
        self._deliveries = self._delivery_log(log_dir, stack_name)
        self._identities = identities
        self.functions: dict[str, FunctionSpec] = {}
        # The template's roles (logical id -> {"arn", "trust", "policies"}) and the role of each function.
        self.roles: dict[str, dict[str, Any]] = {}
        self.function_roles: dict[str, str] = {}
        self.access_entries: list[dict[str, Any]] = []  # the template's EKS access entries, resolved
        self._sqs_by_function: dict[str, SQSClient] = {}
        self._clients_lock = threading.Lock()
        self.environments: dict[str, dict[str, str]] = {}
        self._resources: SandboxResources | None = None
        self._invoker: Invoker | None = None
        self._async: AsyncInvoker | None = None
        self._sources: list[SqsEventSource] = []
        self._function_logs: FunctionLogs | None = None
        self._schedules: Schedules | None = None
        self._deployment: StackDeployment | None = None
        self._lambda: LambdaFunctions | None = None
        self._rule_targets: RuleTargets | None = None
        self.sqs: SQSClient = self._client("sqs", max_pool_connections=10)
        self.dynamodb: DynamoDBClient = self._client("dynamodb", max_pool_connections=10)

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> Runner:
        template = load_template(self.template_path)
        # As CloudFormation does for every stack, before anything is created: parameters that break a Rule together
        check_rules(template, self._parameters)
        resources = SandboxResources(
            template,
            stack_name=self.stack_name,
            region=self.region,
            account=self.account,
            sqs=self.sqs,
            dynamodb=self.dynamodb,
        )
        resources.intrinsics = Intrinsics(
            template,
            resources=resources,
            stack_name=self.stack_name,
            region=self.region,
            account=self.account,
            parameters=self._parameters,
            min_values=self._min_values,
        )
        resources.create_all()
        self._resources = resources
        specs = read_functions(
            template,
            root=self.root,
            intrinsics=resources.intrinsics,
            resources=resources,
            region=self.region,
            account=self.account,
        )
        if self._layer_dir is not None:
            layer = self._layer_dir
            specs = [replace(spec, layer_dirs=(layer,)) if spec.layer_dirs else spec for spec in specs]
        self.functions = {spec.logical_id: spec for spec in specs}
        self._deployment = StackDeployment(
            template,
            stack_name=self.stack_name,
            intrinsics=resources.intrinsics,
            resources=resources,
            clients={name: self._client(name) for name in ("events", "eks", "cloudformation", "logs")},
        )
        self._deployment.deploy(specs)
        self._lambda = functions = LambdaFunctions(
            template,
            intrinsics=resources.intrinsics,
            resources=resources,
            min_values=self._min_values,
            # (Lambda is read by every delivery, each on its own thread, for its function's concurrency, all at
            # once when the answer is due again: a pool smaller than those
            # threads discards connections, one "Connection pool is full" warning line each, on the demo's screen)
            clients={
                "lambda": self._client("lambda", max_pool_connections=self._lambda_readers(specs)),
                "iam": self._client("iam"),
            },
        )
        functions.deploy(specs)
        self._deployment.grant_access()  # (after the functions' roles)
        # (Lambda's reserved concurrency now, which an operator may change: put-function-concurrency)
        self._reserved = ReservedConcurrency(
            {s.logical_id: s.reserved_concurrency for s in specs}, live=functions.reserved
        )
        self.environments = {
            spec.logical_id: lambda_environment(
                spec,
                region=self.region,
                sandbox_env=self._sandbox_env(index, spec),
                overrides=self._overrides,
            )
            for index, spec in enumerate(specs)
        }
        if self._identities is not None:
            self._register_identities(template, resources)
        if self.mode == "inline":
            self._invoker = InlineInvoker(self.environments)
        else:
            self._invoker = ProcessInvoker(
                self.environments,
                {s.logical_id: self._pool_size(s) for s in specs},
                self._log_dir,
                self.faults,
            )
            if self._log_dir is not None:
                # (what the containers write there, in each function's log group, as Lambda sends it)
                self._function_logs = FunctionLogs(
                    self._client("logs"),
                    self._log_dir,
                    {s.logical_id: s.log_group for s in specs},
                    creates=self._log_group_creators(template, resources, specs),
                ).start()
        self._async = AsyncInvoker(
            invoke=self._invoke_reserved,
            journal=self.journal,
            sqs=self.sqs,
            sender=self._function_sqs,
            retry_delays=self._async_retry_delays,
            max_workers=self._async_concurrency * max(1, len(specs)),
            faults=self.faults,
            throttle_scale=self._throttle_scale,
            deliveries=self._deliveries,
            reserved=lambda function: self._reserved.limit(function),
        )
        # (EventBridge's own call to the function, before Lambda's queue: a function deleted or whose permission
        # for the rule was removed refuses it, and the event goes to the target's dead-letter queue)
        self._rule_targets = RuleTargets(
            self._deployment,
            lambda_client=self._client("lambda", max_pool_connections=10),
            sqs=self.sqs,
            region=self.region,
            account=self.account,
            submit=self._async.submit,
        )
        self._rule_targets.deploy(self.functions)
        if self._sqs_sources_enabled:
            for spec in specs:
                self._start_sources(spec)
        self._schedules = Schedules(
            functions=specs,
            submit=self._rule_targets.submit,
            stack_name=self.stack_name,
            account=self.account,
            region=self.region,
            interval_override=self._schedule_interval,
            enabled=self._deployment.delivers,
        )
        if self._schedules_enabled:
            self._schedules.start()
        return self

    def stop(self, *, aws_going: bool = False) -> None:
        """Stop delivering: the invocations in flight finish (their batches deleted, their results in the
        journal). ``aws_going``: the AWS side stops right after (the sandbox's stop), so the pollers' long polls
        are not waited for; they end with it, and what they would receive goes with it (`SqsEventSource.close`).
        Else the pollers' long polls are ended, a batch in hand delivered (the AWS side stays)."""
        for source in self._sources:
            source.stop()
        if not aws_going:
            for source in self._sources:
                source.end_polls()
        if self._schedules is not None:
            self._schedules.stop()
        if self._async is not None:
            self._async.stop()
        # Within one shared grace period.
        deadline = time.monotonic() + self._poll_wait + STOP_GRACE_SECONDS
        for source in self._sources:
            if aws_going:
                source.close(deadline)
            else:
                source.join(deadline)
        self._sources = []
        if self._invoker is not None:
            self._invoker.close()
            self._invoker = None
        if self._function_logs is not None:
            self._function_logs.stop()
            self._function_logs = None
        for handler in self._deliveries.handlers:
            handler.flush()

    @staticmethod
    def _delivery_log(log_dir: Path | None, stack_name: str) -> logging.Logger:
        """The event source mappings' log of every message (``sqs_source.py``): ``deliveries-<stack>.log`` in
        the functions' log directory, kept only when there is one."""
        log = logging.getLogger(f"nodecycle_sandbox.deliveries.{stack_name}")
        log.propagate = False
        for old in list(log.handlers):  # an earlier runner of the same stack name in this process
            log.removeHandler(old)
            old.close()
        log.setLevel(logging.WARNING)
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
            handler = logging.FileHandler(log_dir / f"deliveries-{stack_name}.log")
            handler.setFormatter(logging.Formatter("%(asctime)s %(threadName)s %(message)s"))
            log.addHandler(handler)
            log.setLevel(logging.INFO)
        return log

    def __enter__(self) -> Runner:
        return self.start()

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()

    # -- delivering work ------------------------------------------------------------------------

    def publish(self, event: dict[str, Any]) -> None:
        """Put an event on the default EventBridge bus: every matching rule invokes its function async."""
        assert self._async is not None, "the runner is not started"
        assert self._deployment is not None
        for spec in self.functions.values():
            for rule in spec.rules:
                # A rule an operator disabled (aws events disable-rule), or whose target they removed, delivers
                # nothing, as on AWS.
                if matches(rule.pattern, event) and self._deployment.delivers(spec.logical_id, rule.name):
                    assert self._rule_targets is not None
                    self._rule_targets.submit(spec, event, f"rule:{rule.name}")

    def set_sources_enabled(self, function: str, enabled: bool) -> None:
        """Disable or enable a function's SQS event sources, as `UpdateEventSourceMapping --enabled` does:
        a disabled source leaves its messages in the queue (a stalled queue), and resumes polling when
        enabled again."""
        spec = self.functions[function]
        running = [s for s in self._sources if s.function == function]
        if not enabled:
            for source in running:
                source.stop()
            for source in running:
                source.end_polls()
            deadline = time.monotonic() + self._poll_wait + STOP_GRACE_SECONDS
            for source in running:
                source.join(deadline)
            self._sources = [s for s in self._sources if s.function != function]
        elif not running:
            self._start_sources(spec)

    def _start_sources(self, spec: FunctionSpec) -> None:
        assert self._lambda is not None, "the runner is not started"
        for trigger in spec.sqs:
            if not trigger.enabled:
                continue
            # (each source's pollers share one client of each, with a connection for every poller)
            pollers = self._sqs_concurrency(trigger.max_concurrency)
            source = SqsEventSource(
                spec=spec,
                trigger=trigger,
                invoke=self._invoke_reserved,
                journal=self.journal,
                client_factory=functools.partial(self._mapping_client, spec, trigger),
                region=self.region,
                concurrency=pollers,
                poll_wait=self._poll_wait,
                faults=self.faults,
                fault_client_factory=functools.partial(self._client, "sqs", max_pool_connections=pollers),
                deliveries=self._deliveries,
                throttle_scale=self._throttle_scale,
                mapping=self._lambda.mapping_uuid(spec.logical_id, trigger.name),
            )
            source.start()
            self._sources.append(source)

    def fire_schedule(self, function: str, name: str | None = None) -> str | None:
        """Fire a function's schedule now (the first one, or the one called `name`); the id of the event sent (see
        `Schedules.fire`)."""
        assert self._schedules is not None, "the runner is not started"
        return self._schedules.fire(self.functions[function], name)

    def invoke(self, function: str, event: Any) -> InvocationResult:
        """A synchronous (RequestResponse) invocation, recorded in the journal as "direct"."""
        result = self._invoke(self.functions[function], event)
        self.journal.record(Invocation.of(function, "direct", event, result))
        return result

    def warm(self, function: str, count: int | None = None) -> int:
        """Start the function's containers before they are needed (all it may run at once by default), as a
        deployment that has been busy before has them: a measurement then sees no cold start. Returns how
        many were started; inline mode has no containers to start."""
        assert self._invoker is not None, "the runner is not started"
        if not isinstance(self._invoker, ProcessInvoker):
            return 0
        spec = self.functions[function]
        return self._invoker.warm(spec, self._pool_size(spec) if count is None else count)

    def recycle(self, function: str) -> None:
        """Stop the function's idle containers, as Lambda does with containers idle for a while: whatever
        they cached is gone, and the next invocations start new ones."""
        assert self._invoker is not None, "the runner is not started"
        if isinstance(self._invoker, ProcessInvoker):
            self._invoker.recycle(self.functions[function])

    def _invoke(self, spec: FunctionSpec, event: Any) -> InvocationResult:
        assert self._invoker is not None, "the runner is not started"
        return self._invoker.invoke(spec, event)

    def invoke_event(self, function: str, event: Any) -> bool:
        """An Event invocation of the function named ``function`` (its physical name), as Lambda's Invoke takes
        one: into its asynchronous queue. False: no function of this runner's."""
        spec = next((s for s in self.functions.values() if s.name == function), None)
        if spec is None or self._async is None:
            return False
        self._async.submit(spec, event, "invoke")
        return True

    def invoke_sync(self, function: str, event: Any) -> dict[str, Any] | None:
        """A RequestResponse invocation of the function named ``function`` (its physical name), as Lambda's Invoke
        runs one: once, within its reserved concurrency (refused beyond it, as a throttle); its answer (plain
        data, for ``aws/lambda_invoke.py`` in the AWS process) what the handler returned, or Lambda's error
        document, or the throttle. None: no function of this runner's. Recorded in the journal as "invoke:sync"."""
        spec = next((s for s in self.functions.values() if s.name == function), None)
        if spec is None or self._invoker is None:
            return None
        result = self._invoke_reserved(spec, event)
        if result.throttled:
            self.journal.record_throttle(Throttle(spec.logical_id, SYNC_INVOKE, time.time(), "refused"))
            return {"payload": None, "error": None, "throttled": True}
        self.journal.record(Invocation.of(spec.logical_id, SYNC_INVOKE, event, result))
        if result.ok:
            return {"payload": result.response, "error": None, "throttled": False}
        error: dict[str, Any] = {
            "errorMessage": result.error_message,
            "errorType": result.error_type,
            "requestId": result.request_id,
            "stackTrace": [],
        }
        return {"payload": None, "error": error, "throttled": False}

    def _invoke_reserved(self, spec: FunctionSpec, event: Any) -> InvocationResult:
        """An invocation by one of the function's event sources, within its reserved concurrency: refused (a
        throttled result, the handler not run) while all of it is in flight. A test's direct `invoke` stays
        outside the count: it probes the function, it is not one of its sources."""
        if not self._reserved.try_acquire(spec.logical_id):
            return throttled_result()
        try:
            return self._invoke(spec, event)
        finally:
            self._reserved.release(spec.logical_id)

    # -- what was deployed ----------------------------------------------------------------------

    def queue(self, logical_id: str) -> QueueInfo:
        assert self._resources is not None, "the runner is not started"
        return self._resources.queues[logical_id]

    def table(self, logical_id: str) -> TableInfo:
        assert self._resources is not None, "the runner is not started"
        return self._resources.tables[logical_id]

    def access_key(self, function: str) -> str:
        return self.environments[function]["AWS_ACCESS_KEY_ID"]

    def function_of_access_key(self, access_key: str) -> str | None:
        """Which function called AWS with this access key (each function has its own)."""
        for logical_id, environment in self.environments.items():
            if environment.get("AWS_ACCESS_KEY_ID") == access_key:
                return logical_id
        return None

    # -- helpers --------------------------------------------------------------------------------

    def _register_identities(self, template: Mapping[str, Any], resources: SandboxResources) -> None:
        """Tell the AWS side which role each function's key acts as, with the roles' policies."""
        assert self._identities is not None
        assert resources.intrinsics is not None
        self.roles = template_roles(template, resources.intrinsics, resources)
        self.function_roles = {name: function_role(template, name) for name in self.functions}
        self.access_entries = access_entries(template, resources.intrinsics, resources)
        keys = [
            {
                "access_key": self.access_key(name),
                "role_arn": self.roles[role]["arn"],
                "session_name": self.functions[name].name,  # Lambda's session name is the function's name
                "account": self.account,
            }
            for name, role in self.function_roles.items()
        ]
        self._identities(list(self.roles.values()), keys)

    def _log_group_creators(
        self, template: Mapping[str, Any], resources: SandboxResources, specs: list[FunctionSpec]
    ) -> set[str]:
        """The functions whose role lets Lambda create their log group when it is missing (function_logs.py)."""
        assert resources.intrinsics is not None
        try:
            roles = self.roles or template_roles(template, resources.intrinsics, resources)
        except PolicyError:
            roles = {}  # (roles the sandbox cannot read: none may, the harsher guess)
        creators = set()
        for spec in specs:
            declared = (template["Resources"][spec.logical_id].get("Properties") or {}).get("Role")
            try:
                role = roles[function_role(template, spec.logical_id)] if declared else None
            except (PolicyError, KeyError):
                continue
            arn = f"arn:aws:logs:{self.region}:{self.account}:log-group:{spec.log_group}"
            if creates_its_group(role, arn):
                creators.add(spec.logical_id)
        return creators

    def _function_sqs(self, spec: FunctionSpec) -> SQSClient:
        """The SQS client Lambda uses for a function's failed events (its role), made once."""
        with self._clients_lock:
            client = self._sqs_by_function.get(spec.logical_id)
            if client is None:
                client = self._client("sqs", access_key=self.access_key(spec.logical_id))
                self._sqs_by_function[spec.logical_id] = client
            return client

    def _mapping_client(self, spec: FunctionSpec, trigger: SqsTrigger) -> SQSClient:
        """An event source mapping polls with the function's role, as Lambda does, and reads the queue's
        attributes when it starts; its pollers share the client, a connection each."""
        client: SQSClient = self._client(
            "sqs",
            access_key=self.access_key(spec.logical_id),
            max_pool_connections=self._sqs_concurrency(trigger.max_concurrency),
        )
        client.get_queue_attributes(QueueUrl=trigger.queue.url, AttributeNames=["VisibilityTimeout"])
        return client

    def _sandbox_env(self, index: int, spec: FunctionSpec) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": access_key_for(index, spec.logical_id, self.stack_name),
            "AWS_SECRET_ACCESS_KEY": SANDBOX_SECRET_KEY,
            # No instance metadata service here: do not let botocore wait for one.
            "AWS_EC2_METADATA_DISABLED": "true",
            # No X-Ray daemon or Lambda trace segment either.
            "POWERTOOLS_TRACE_DISABLED": "true",
        }

    def _sqs_concurrency(self, maximum: int | None) -> int:
        if self.mode == "inline":
            return 1
        wanted = maximum or self._default_concurrency
        return wanted if self._concurrency_cap is None else min(wanted, self._concurrency_cap)

    def _lambda_readers(self, specs: list[FunctionSpec]) -> int:
        """The threads that may read Lambda at once: each mapping's pollers, a twin of each (a duplicate delivered
        alongside), the asynchronous invokers' workers, and a few more (schedules, the relay of invocations)."""
        pollers = sum(self._sqs_concurrency(t.max_concurrency) for s in specs for t in s.sqs if t.enabled)
        return 2 * pollers + self._async_concurrency * max(1, len(specs)) + 4

    def _pool_size(self, spec: FunctionSpec) -> int:
        size = sum(self._sqs_concurrency(t.max_concurrency) for t in spec.sqs if t.enabled)
        if spec.rules or spec.schedules:
            size += self._async_concurrency
        if spec.reserved_concurrency is not None:  # it never runs more at once
            size = min(size, spec.reserved_concurrency)
        return max(1, size)

    def _client(
        self, service: str, *, max_pool_connections: int = 2, access_key: str = RUNNER_ACCESS_KEY
    ) -> Any:
        return boto3.client(
            service,  # type: ignore[call-overload]
            endpoint_url=self.endpoint_url,
            region_name=self.region,
            aws_access_key_id=access_key,
            aws_secret_access_key=SANDBOX_SECRET_KEY,
            config=Config(
                retries={"max_attempts": 2, "mode": "standard"},
                read_timeout=self._poll_wait + 30,
                max_pool_connections=max_pool_connections,
                user_agent_extra=RUNNER_AGENT,
            ),
        )


def access_key_for(index: int, logical_id: str, stack_name: str = "") -> str:
    """A fake but well-formed access key id (20 upper-case alphanumerics) that names the function, and is
    its own: two stacks deployed on one sandbox have functions of the same name, but not the same role."""
    stem = re.sub(r"[^A-Z0-9]", "", logical_id.upper())[:10].ljust(10, "X")
    stack = hashlib.sha256(stack_name.encode()).hexdigest()[:4].upper()
    return f"AKIA{stem}{stack}{index:02d}"
