"""`Sandbox`: the whole local stand-in for AWS and the cluster, for the CLI, the demo, tests and benchmarks.

Processes and threads:
- the AWS process (default; or in this process with `aws_process=False`): moto's server on a free
  loopback port, with the lifecycle emulation and its timer thread;
- this process: the Kubernetes API server, the runner's pollers, schedules and async invokers, and a relay
  thread carrying lifecycle events (-> EventBridge rules) and node registrations (-> Kubernetes) out of
  the AWS process;
- worker processes (mode "process"): warm Lambda containers, started on demand per function.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Protocol

import boto3
from botocore.config import Config

from nodecycle_sandbox.aws.control import SANDBOX_ACCOUNT, AwsControl, AwsControls
from nodecycle_sandbox.aws.group import AutoScalingGroup, GroupSpec
from nodecycle_sandbox.aws.nodes import NodeRegistry
from nodecycle_sandbox.aws.process import AwsProcess
from nodecycle_sandbox.aws.server import MotoServer
from nodecycle_sandbox.faults import Fault, Firing
from nodecycle_sandbox.runner.cfn_yaml import load_template
from nodecycle_sandbox.runner.faults import RunnerFaults
from nodecycle_sandbox.runner.intrinsics import check_parameters, check_rules
from nodecycle_sandbox.runner.runner import SANDBOX_SECRET_KEY, Runner
from nodecycle_sandbox.start_profile import Profile

if TYPE_CHECKING:
    from mypy_boto3_autoscaling import AutoScalingClient
    from mypy_boto3_ec2 import EC2Client

    from nodecycle_sandbox.kube import KubeServer

OPERATOR_ACCESS_KEY = "AKIASANDBOXOPERATOR0"
# Variables that belong to one Lambda function, not to "the handlers' environment" as a whole.
_PER_FUNCTION = frozenset(
    {
        "AWS_LAMBDA_FUNCTION_NAME",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
        "AWS_LAMBDA_FUNCTION_VERSION",
        "AWS_LAMBDA_LOG_GROUP_NAME",
        "AWS_LAMBDA_LOG_STREAM_NAME",
        "LAMBDA_TASK_ROOT",
        "AWS_EXECUTION_ENV",
    }
)


class ClusterServer(NodeRegistry, Protocol):
    """What the sandbox needs of `nodecycle_sandbox.kube.KubeServer`."""

    @property
    def url(self) -> str: ...

    @property
    def ca_pem(self) -> bytes | str: ...

    def start(self) -> Any: ...

    def stop(self) -> Any: ...


@dataclass(frozen=True)
class SandboxOptions:
    root: Path = field(default_factory=Path.cwd)
    template: Path | None = None  # default: <root>/template.yaml
    region: str = "eu-west-1"
    stack_name: str = "nodecycle"
    cluster_name: str = "sandbox"
    # The EKS cluster's authentication mode: access entries need API or API_AND_CONFIG_MAP.
    authentication_mode: str = "API_AND_CONFIG_MAP"
    mode: Literal["process", "inline"] = "process"
    aws_process: bool = True
    # Template parameter overrides (by parameter name) and handler environment overrides (by variable).
    parameters: Mapping[str, str] = field(default_factory=dict)
    settings: Mapping[str, str] = field(default_factory=dict)
    # None: no group (tests that build their own).
    group: GroupSpec | None = field(default_factory=GroupSpec)
    # "eventbridge": hooks notify EventBridge only; "sqs": the intake queue too (with the hook role).
    hook_target: Literal["eventbridge", "sqs"] = "eventbridge"
    node_ready_after: float = 0.0
    node_remove_after: float = 0.0  # delay between an instance's end and its node's removal
    global_timeout_factor: float | None = None
    schedule_interval: float | None = None
    schedules_enabled: bool = True
    # False: nothing polls the work queues; a test delivers their messages itself (e.g. to inject crashes).
    sqs_sources_enabled: bool = True
    async_retry_delays: tuple[float, ...] = (1.0, 2.0)
    async_concurrency: int = 2  # EventBridge and schedule invocations in flight at once, per function
    log_dir: Path | None = None
    # What the platform team applied to the cluster (`kubectl apply -f`): None, <root>/deploy/rbac.yaml;
    # "" nothing (no namespace, no budget ConfigMap, no role: every function call is forbidden).
    rbac_manifest: str | Path | None = None
    # The handlers' copy of the layer (the `nodecycle` package); None: the template's (`layers/`).
    layer_dir: Path | None = None
    # At most this many concurrent invocations per SQS mapping (an account's concurrency limit); None: the
    # template's MaximumConcurrency.
    concurrency_cap: int | None = None
    # False: a Number parameter below its MinValue is accepted (only that constraint is lifted), for
    # campaigns that compress minutes into seconds (a 5 s visibility timeout, where AWS wants the functions'
    # timeout at least).
    min_values: bool = True
    # EC2's request throttling per account, Region and action (aws/ec2_throttling.py): every key's requests but
    # the sandbox's own client's (``client``) take tokens; False: none is refused.
    ec2_throttling: bool = True


class Sandbox:
    """Start with `with Sandbox(SandboxOptions(...)) as sandbox:`; then `sandbox.asg`, `sandbox.kube`,
    `sandbox.runner`, `sandbox.aws` (controls and records of the emulation) and `sandbox.env`."""

    def __init__(self, options: SandboxOptions | None = None, *, kube: ClusterServer | None = None) -> None:
        self.options = options or SandboxOptions()
        self._kube = kube
        self._aws_process: AwsProcess | None = None
        self._moto: MotoServer | None = None
        self._local_control: AwsControl | None = None
        self._runner: Runner | None = None
        self._extra_runners: list[Runner] = []
        self._asg: AutoScalingGroup | None = None
        self._started = threading.Event()
        self.endpoint_url = ""
        # One injector for every stack's runner: its seeded dice are the run's, whichever stack rolls them.
        self.runner_faults = RunnerFaults()
        # Where the start and the stop go, with NODECYCLE_SANDBOX_PROFILE set (start_profile.py).
        self.profile = Profile()

    # -- what tests use -------------------------------------------------------------------------

    @property
    def kube(self) -> KubeServer:
        """The in-memory API server (a sandbox started with a stand-in cluster has none: use the stand-in)."""
        from nodecycle_sandbox.kube import KubeServer

        if not isinstance(self._kube, KubeServer):
            raise TypeError("this sandbox runs with a stand-in cluster, not the in-memory API server")
        return self._kube

    @property
    def runner(self) -> Runner:
        assert self._runner is not None, "the sandbox is not started"
        return self._runner

    @property
    def asg(self) -> AutoScalingGroup:
        assert self._asg is not None, "the sandbox has no group (options.group is None) or is not started"
        return self._asg

    @property
    def aws(self) -> AwsControls:
        if self._local_control is not None:
            return self._local_control
        assert self._aws_process is not None, "the sandbox is not started"
        assert self._aws_process.control is not None
        return self._aws_process.control

    @property
    def env(self) -> dict[str, str]:
        """The handlers' shared environment (settings, endpoint, region) with an operator's credentials:
        what a CLI command or a debugger session needs to act as nodecycle against the sandbox."""
        environments = list(self.runner.environments.values())
        shared = {
            k: v
            for k, v in environments[0].items()
            if k not in _PER_FUNCTION and all(e.get(k) == v for e in environments)
        }
        return {
            **shared,
            "AWS_ACCESS_KEY_ID": OPERATOR_ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SANDBOX_SECRET_KEY,
        }

    def client(self, service: str) -> Any:
        """A boto3 client of the sandbox's AWS with the operator's credentials."""
        return boto3.client(
            service,  # type: ignore[call-overload]
            endpoint_url=self.endpoint_url,
            region_name=self.options.region,
            aws_access_key_id=OPERATOR_ACCESS_KEY,
            aws_secret_access_key=SANDBOX_SECRET_KEY,
            # The sandbox allows what AWS forbids for speed, e.g. heartbeat timeouts under 30 s.
            config=Config(parameter_validation=False, retries={"max_attempts": 2, "mode": "standard"}),
        )

    # -- faults ---------------------------------------------------------------------------------

    def arm_faults(self, faults: Sequence[Fault], seed: int) -> None:
        """Inject ``faults`` from now on, drawn with ``seed``: into the API server, into the AWS calls of
        every stack's functions, and into the runners' deliveries and containers (replacing any plan)."""
        self.kube.faults.arm(list(faults), seed)
        callers = sorted(
            {env["AWS_ACCESS_KEY_ID"] for runner in self._runners() for env in runner.environments.values()}
        )
        self.aws.arm_faults(faults=list(faults), seed=seed, callers=callers)
        self.runner_faults.arm(list(faults), seed)

    def disarm_faults(self) -> None:
        self.kube.faults.disarm()
        self.aws.disarm_faults()
        self.runner_faults.disarm()

    @contextlib.contextmanager
    def lagging_ec2(self, seconds: float) -> Iterator[list[str]]:
        """EC2's reads by every stack's functions lag its writes by ``seconds`` meanwhile (aws/ec2_consistency.py):
        a new address or instance unknown to them, an association, a release, a tag not shown yet. The list given
        is filled, once the block ends, with what the lag met ("<operation> <id>")."""
        callers = sorted(
            {env["AWS_ACCESS_KEY_ID"] for runner in self._runners() for env in runner.environments.values()}
        )
        met: list[str] = []
        self.aws.lag_ec2(seconds=seconds, callers=callers)
        try:
            yield met
        finally:
            met.extend(self.aws.lag_ec2(seconds=0, callers=[]))

    def fault_firings(self) -> list[Firing]:
        """Every fault injected since the plan was armed, in time order."""
        firings = [*self.kube.faults.firings(), *self.aws.fault_firings(), *self.runner_faults.firings()]
        return sorted(firings, key=lambda firing: firing.at)

    def publish(self, event: dict[str, Any]) -> None:
        """AWS putting its own event on the bus: lifecycle events go to the runner's rules. Only AWS may put an
        ``aws.*`` event: an operator's or a function's PutEvents goes to moto, which refuses such a source as
        EventBridge does (``aws/events_sources.py``), so a test standing for a person uses the queues instead."""
        self._started.wait()
        for runner in self._runners():  # none once stopping: late events have nowhere to go
            runner.publish(event)

    def invoke(self, function: str, event: Any) -> bool:
        """An operator's Event invocation of one of the stacks' functions (``aws lambda invoke --invocation-type
        Event``, ``aws/lambda_invoke.py``): run by its runner as Lambda runs an asynchronous event."""
        self._started.wait()
        return any(runner.invoke_event(function, event) for runner in self._runners())

    def invoke_sync(self, function: str, event: Any) -> dict[str, Any] | None:
        """An operator's RequestResponse invocation of one of the stacks' functions (``aws lambda invoke``,
        ``aws/lambda_invoke.py``): run once by its runner, its answer; None: no stack's function."""
        self._started.wait()
        for runner in self._runners():
            answer = runner.invoke_sync(function, event)
            if answer is not None:
                return answer
        return None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> Sandbox:
        options = self.options
        parameters = dict(options.parameters)
        if options.group is not None:
            parameters.setdefault("ManagedGroups", options.group.name)
        # As CloudFormation does, refuse a bad parameter value, or values that break one of the template's Rules
        # together, before anything starts.
        template, given = load_template(self._template()), {"ClusterName": options.cluster_name, **parameters}
        check_parameters(template, given, min_values=options.min_values)
        check_rules(template, given)
        phase = self.profile.phase
        try:
            with phase("kube"):
                if self._kube is None:
                    from nodecycle_sandbox.kube import KubeServer

                    self._kube = KubeServer(tls=True, cluster_name=options.cluster_name)
                kube = self._kube
                kube.start()
                self._prepare_cluster()
            with phase("aws"):
                self._start_aws()
                self.aws.throttle_ec2(on=options.ec2_throttling, unmetered=[OPERATOR_ACCESS_KEY])
                self.aws.configure(global_timeout_factor=options.global_timeout_factor)
                self.aws.plan_nodes(
                    ready_after=options.node_ready_after, remove_after=options.node_remove_after
                )
                ca_pem = kube.ca_pem
                self.aws.point_cluster(
                    name=options.cluster_name,
                    endpoint=kube.url,
                    ca_pem=ca_pem.decode() if isinstance(ca_pem, bytes) else ca_pem,
                    authentication_mode=options.authentication_mode,
                )
            with phase("runner"):
                self._runner = self._new_runner(options.stack_name, parameters, options.settings)
                self._grant_cluster_access(self._runner)
            self._started.set()
            if options.group is not None:
                with phase("group"):
                    self.create_group(options.group)
        except BaseException:
            self.stop()
            raise
        return self

    def add_stack(
        self,
        stack_name: str,
        *,
        parameters: Mapping[str, str] | None = None,
        settings: Mapping[str, str] | None = None,
        group: GroupSpec | None = None,
    ) -> tuple[Runner, AutoScalingGroup | None]:
        """Deploy the template once more, as another stack on the same cluster and AWS (its own queues,
        table and owner id), with its own group if given. Lifecycle events reach every stack's rules."""
        values = dict(parameters or {})
        if group is not None:
            values.setdefault("ManagedGroups", group.name)
        runner = self._new_runner(stack_name, values, settings or {})
        self._extra_runners.append(runner)
        self._grant_cluster_access(runner)
        created = None
        if group is not None:
            created = self._new_group(group)
        return runner, created

    def _new_runner(
        self, stack_name: str, parameters: Mapping[str, str], settings: Mapping[str, str]
    ) -> Runner:
        options = self.options
        return Runner(
            template=self._template(),
            root=options.root,
            endpoint_url=self.endpoint_url,
            region=options.region,
            stack_name=stack_name,
            parameters={"ClusterName": options.cluster_name, **parameters},
            environment=settings,
            mode=options.mode,
            schedule_interval=options.schedule_interval,
            schedules_enabled=options.schedules_enabled,
            sqs_sources_enabled=options.sqs_sources_enabled,
            async_retry_delays=options.async_retry_delays,
            async_concurrency=options.async_concurrency,
            log_dir=options.log_dir,
            identities=self._register_identities,
            layer_dir=options.layer_dir,
            concurrency_cap=options.concurrency_cap,
            min_values=options.min_values,
            faults=self.runner_faults,
        ).start()

    def _template(self) -> Path:
        return self.options.template or self.options.root / "template.yaml"

    def _register_identities(self, roles: list[dict[str, Any]], keys: list[dict[str, str]]) -> None:
        """Each function's key acts as its role: AWS evaluates its calls against the role's policies."""
        self.aws.register_identities(roles=roles, keys=keys)

    def _prepare_cluster(self) -> None:
        """The cluster as a platform team leaves it before deploying: the operator is an administrator,
        and the RBAC manifest (its roles, the budget namespace and ConfigMap) is applied."""
        from nodecycle_sandbox.kube import KubeServer

        if not isinstance(self._kube, KubeServer):
            return
        self._kube.access.add_admin_key(OPERATOR_ACCESS_KEY)
        manifest = self.options.rbac_manifest
        if manifest is None:
            manifest = self.options.root / "deploy" / "rbac.yaml"
        if manifest != "":
            self._kube.apply(manifest)

    def _grant_cluster_access(self, runner: Runner) -> None:
        """EKS's side of the stack: each function's key as a session of its role, which the API server maps by
        what the EKS emulation says of it at authentication (the entries the stack made, as they are now)."""
        from nodecycle_sandbox.aws.eks import access_reader
        from nodecycle_sandbox.kube import KubeServer

        if not isinstance(self._kube, KubeServer):
            return
        if not self._kube.access.reads_eks:
            self._kube.access.read_access_from(
                access_reader(
                    endpoint_url=self.endpoint_url,
                    region=self.options.region,
                    cluster=self.options.cluster_name,
                    access_key=OPERATOR_ACCESS_KEY,
                    secret_key=SANDBOX_SECRET_KEY,
                )
            )
        for function, role in runner.function_roles.items():
            self._kube.map_role(
                runner.access_key(function), runner.roles[role]["arn"], runner.functions[function].name
            )

    def _start_aws(self) -> None:
        if self.options.aws_process:
            self._aws_process = AwsProcess(region=self.options.region, events=self, nodes=self._kube)
            self.endpoint_url = self._aws_process.start()
        else:
            self._moto = MotoServer()
            self.endpoint_url = self._moto.start()
            self._local_control = AwsControl(region=self.options.region)
            self._local_control.connect(events=self, nodes=self._kube)

    def add_group(self, spec: GroupSpec) -> AutoScalingGroup:
        """Create another group (its hooks, then its instances, through the launch hooks); the stacks that
        manage it (by name or by tag) handle its lifecycles."""
        return self._new_group(spec)

    def _runners(self) -> list[Runner]:
        return [r for r in (self._runner, *self._extra_runners) if r is not None]

    def create_group(self, spec: GroupSpec) -> AutoScalingGroup:
        """The sandbox's group, for a sandbox started without one (``options.group=None``) that prepares
        something first (the CLI checks the settings and creates an address pool before the launches)."""
        if self._asg is not None:
            raise RuntimeError("the sandbox has its group already")
        self._asg = self._new_group(spec)
        return self._asg

    def _new_group(self, spec: GroupSpec) -> AutoScalingGroup:
        hooks = spec.hooks
        if self.options.hook_target == "sqs":
            intake = self.runner.queue("IntakeQueue").arn
            role = f"arn:aws:iam::{SANDBOX_ACCOUNT}:role/{self.options.stack_name}-HookNotificationRole"
            hooks = tuple(
                replace(h, target_arn=h.target_arn or intake, role_arn=h.role_arn or role) for h in hooks
            )
        autoscaling: AutoScalingClient = self.client("autoscaling")
        ec2: EC2Client = self.client("ec2")
        group = AutoScalingGroup(
            autoscaling=autoscaling, ec2=ec2, control=self.aws, region=self.options.region, name=spec.name
        )
        group.create(replace(spec, hooks=hooks))
        return group

    def stop(self) -> None:
        self._started.set()  # release a relay waiting in publish()
        phase = self.profile.phase
        runners, self._runner, self._extra_runners = self._runners(), None, []
        with phase("stop runners"):
            for runner in runners:
                runner.stop(aws_going=True)  # (the AWS side stops next: the long polls end with it)
        with phase("stop aws"):
            if self._aws_process is not None:
                self._aws_process.stop()
                self._aws_process = None
            if self._local_control is not None:
                self._local_control.close()
                self._local_control = None
            if self._moto is not None:
                self._moto.stop()
                self._moto = None
        try:
            with phase("stop kube"):
                if self._kube is not None:
                    self._kube.stop()
        finally:
            self.profile.write(size=self.options.group.size if self.options.group else 0)

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()
