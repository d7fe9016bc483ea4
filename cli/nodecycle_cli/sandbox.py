"""``nodecycle sandbox``: nodecycle on this machine, with no AWS account and no cluster, until Ctrl-C.

It starts moto (with Auto Scaling lifecycle hooks), the in-memory Kubernetes API server and the runner that
delivers events and queues to the real handlers as Lambda would; creates an Auto Scaling group whose
instances register as nodes; seeds workloads; writes a kubeconfig and an environment file; then reports
each lifecycle action as it ends. In pool mode (``--eip-mode pool``) it names the pool (``EipPoolName``,
default sandbox-pool) and allocates its tagged addresses first, two per instance.

A parameter the template refuses stops it at once, naming the parameter and the constraint; so do settings
that every function would refuse, and the first invocation that fails while the group launches.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from nodecycle_cli.failures import CommandError
from nodecycle_sandbox import Sandbox, SandboxOptions
from nodecycle_sandbox.aws.group import GroupSpec, default_hooks
from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.runner.intrinsics import ParameterError
from nodecycle_sandbox.scenario import finished_actions, project_root, split_seed

STATE_DIR = Path(".nodecycle")
GROUP = "nodecycle-workers"
POOL_NAME = "sandbox-pool"
# The hooks the README recommends: longer than the default settings' shortest heartbeat timeout (615 s).
HEARTBEAT_TIMEOUT = 900


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "sandbox",
        help="run nodecycle locally (moto + an in-memory Kubernetes API server) until Ctrl-C",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_sandbox_options(parser)
    parser.add_argument(
        "--refresh", action="store_true", help="start an instance refresh once the group is up"
    )
    parser.set_defaults(run=run)


def add_sandbox_options(parser: argparse.ArgumentParser, nodes: int = 6) -> None:
    parser.add_argument("--nodes", type=int, default=nodes, help=f"instances in the group (default {nodes})")
    parser.add_argument(
        "--cluster",
        type=Path,
        help="seed file: workloads (and extra nodes) to create; default: a built-in one",
    )
    parser.add_argument("--kubeconfig", type=Path, default=STATE_DIR / "kubeconfig", help="where to write it")
    parser.add_argument("--env-file", type=Path, default=STATE_DIR / "sandbox.env", help="where to write it")
    parser.add_argument("--log-dir", type=Path, default=STATE_DIR / "logs", help="the functions' logs")
    # %(default)s: the demo sets its own defaults over these (set_defaults), and its help must say those
    parser.add_argument("--max-unavailable", default="2", help="BudgetMaxUnavailable (default %(default)s)")
    parser.add_argument(
        "--max-unavailable-per-zone", default="1", help="BudgetMaxUnavailablePerZone (default %(default)s)"
    )
    parser.add_argument(
        "--eip-mode",
        choices=("off", "allocate", "pool"),
        default="allocate",
        help="EipMode (default %(default)s)",
    )
    parser.add_argument(
        "--parameter",
        action="append",
        default=[],
        type=_name_value,
        metavar="NAME=VALUE",
        help="any other template parameter, e.g. DrainTimeoutSeconds=300 (repeatable)",
    )


def _name_value(text: str) -> str:
    """A --parameter as given, refused by the parser (before the sandbox starts) unless it is NAME=VALUE."""
    name, sep, _ = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"needs NAME=VALUE, got {text!r}")
    return text


def options_from(args: argparse.Namespace) -> SandboxOptions:
    parameters = {
        "BudgetMaxUnavailable": args.max_unavailable,
        "BudgetMaxUnavailablePerZone": args.max_unavailable_per_zone,
        "EipMode": args.eip_mode,
        "DrainPollSeconds": "2",
        "BudgetRetrySeconds": "10",
        "DrainConcurrency": "4",
        "ManagedGroups": GROUP,
    }
    given = {}
    for item in args.parameter:
        name, sep, value = item.partition("=")
        if not sep:
            raise CommandError(f"--parameter needs NAME=VALUE, got {item!r}")
        given[name] = value
    if (given.get("EipMode") or args.eip_mode) == "pool":
        parameters["EipPoolName"] = POOL_NAME  # the sandbox creates it (a --parameter may name another)
    parameters.update(given)
    args.log_dir.mkdir(parents=True, exist_ok=True)
    return SandboxOptions(
        root=project_root(),
        parameters=parameters,
        group=None,  # created once the settings are checked and the pool exists
        node_ready_after=2.0,
        node_remove_after=5.0,
        log_dir=args.log_dir,
    )


def start(args: argparse.Namespace) -> tuple[Sandbox, KubeServer]:
    """Start the sandbox, bring the group in service, seed the workloads, write kubeconfig and env file."""
    extra_nodes, workloads = split_seed(args.cluster)
    options = options_from(args)
    # (the kubeconfig written for kubectl holds one token, which must outlive the 15 minutes EKS gives a token:
    # the sandbox has no exec plugin to renew it. The functions renew theirs all the same.)
    kube = KubeServer(tls=True, token_max_age_seconds=None)
    try:
        sandbox = Sandbox(options, kube=kube).start()
    except ParameterError as error:  # refused before anything started, as CloudFormation would
        raise CommandError(str(error)) from None
    try:
        check_settings(sandbox)
        if options.parameters["EipMode"] == "pool":
            pool = options.parameters["EipPoolName"]
            create_pool(sandbox, pool, 2 * args.nodes)
            print(f"address pool {pool}: {2 * args.nodes} Elastic IPs tagged nodecycle:pool={pool}")
        sandbox.create_group(
            GroupSpec(
                name=GROUP,
                size=args.nodes,
                hooks=default_hooks(HEARTBEAT_TIMEOUT),
                # Spot capacity (all of it) for a demo of Spot interruptions
                on_demand_percentage=0 if getattr(args, "spot", False) else None,
            )
        )
        print(f"waiting for {args.nodes} instances to launch through nodecycle's launch hook...")
        wait_for_launches(sandbox, args.nodes, timeout=120 + 15 * args.nodes, log_dir=args.log_dir)
        kube.seed({"nodes": extra_nodes, **workloads})
        kube.settle(timeout=60)
        args.kubeconfig.parent.mkdir(parents=True, exist_ok=True)
        kube.write_kubeconfig(args.kubeconfig)
        write_env_file(sandbox, args.env_file, args.kubeconfig)
    except BaseException:
        sandbox.stop()
        raise
    return sandbox, kube


def check_settings(sandbox: Sandbox) -> None:
    """The settings every function reads, validated as the functions will: a bad combination (each value
    allowed by the template, but not together) is said now rather than by every first invocation."""
    from nodecycle.settings import Settings, SettingsError

    try:
        Settings.from_env(sandbox.env)
    except SettingsError as error:
        raise CommandError(f"the functions would refuse these settings: {error}") from None


def create_pool(sandbox: Sandbox, name: str, count: int) -> None:
    """The addresses of an EipMode=pool stack, as an operator allocates them: tagged with the pool and owner."""
    ec2 = sandbox.client("ec2")
    tags = [
        {"Key": "nodecycle:pool", "Value": name},
        {"Key": "nodecycle:owner", "Value": sandbox.env["NODECYCLE_OWNER_ID"]},
    ]
    for _ in range(count):
        ec2.allocate_address(Domain="vpc", TagSpecifications=[{"ResourceType": "elastic-ip", "Tags": tags}])


def wait_for_launches(sandbox: Sandbox, count: int, *, timeout: float, log_dir: Path) -> None:
    """Until ``count`` instances are in service. A function that cannot start (its handler does not load, or
    its settings are refused) ends it at once with its error and where its log is; any other failure is
    said at once too, and waited through, since Lambda retries it."""
    deadline = time.monotonic() + timeout
    said: set[str] = set()
    last = ""
    while len(sandbox.asg.in_state("InService")) < count:
        for invocation in sandbox.runner.journal.invocations():
            if (invocation.ok and not invocation.failures) or invocation.request_id in said:
                continue
            said.add(invocation.request_id)
            error = invocation.error or f"{len(invocation.failures)} records of its batch failed"
            last = f"{invocation.function} failed: {error} (its log: {log_dir / invocation.function}.log)"
            if invocation.init_error or error.startswith("SettingsError"):
                raise CommandError(
                    f"{invocation.function} failed while the group launched: {error} "
                    f"(its log: {log_dir / invocation.function}.log)"
                )
            print(f"     {last}; retried as Lambda would", file=sys.stderr, flush=True)
        if time.monotonic() > deadline:
            raise CommandError(
                f"the {count} instances were not in service within {timeout:.0f} s"
                + (f"; last failure: {last}" if last else f" (the functions' logs: {log_dir}/)")
            )
        time.sleep(0.25)


def write_env_file(sandbox: Sandbox, path: Path, kubeconfig: Path) -> None:
    """What a shell needs to act as an operator of the sandbox (nodecycle status, budget show, aws, kubectl)."""
    env = sandbox.env
    lines = {
        "AWS_ENDPOINT_URL": env["AWS_ENDPOINT_URL"],
        "AWS_ACCESS_KEY_ID": env["AWS_ACCESS_KEY_ID"],
        "AWS_SECRET_ACCESS_KEY": env["AWS_SECRET_ACCESS_KEY"],
        "AWS_DEFAULT_REGION": sandbox.options.region,
        "KUBECONFIG": str(kubeconfig.resolve()),
        "NODECYCLE_STACK": sandbox.options.stack_name,
        "NODECYCLE_RECORD_TABLE": env["NODECYCLE_RECORD_TABLE"],
        "NODECYCLE_OWNER_ID": env["NODECYCLE_OWNER_ID"],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"export {name}={shlex.quote(value)}\n" for name, value in lines.items()))


def run(args: argparse.Namespace) -> int:
    began = time.time()
    sandbox, kube = start(args)
    try:
        pods = len(kube.objects("pods"))
        print(
            f"""
nodecycle sandbox is running ({time.time() - began:.0f} s to start)
  Kubernetes API  {kube.url}   kubeconfig: {args.kubeconfig}
  AWS (moto)      {sandbox.endpoint_url}
  group           {sandbox.asg.name}: {args.nodes} instances, {pods} pods
  environment     {args.env_file}   (source it for kubectl, aws, nodecycle status, budget show, doctor)
  function logs   {args.log_dir}/

Try, in another shell:
  . {args.env_file}
  kubectl get nodes -L topology.kubernetes.io/zone
  nodecycle status
  nodecycle budget show
  nodecycle doctor
  aws autoscaling start-instance-refresh --auto-scaling-group-name {sandbox.asg.name} \\
      --preferences MinHealthyPercentage=50      (if the AWS CLI is installed)

Lifecycle actions appear below as they end. Ctrl-C to stop.
"""
        )
        if args.refresh:
            refresh = sandbox.asg.start_refresh(min_healthy_percentage=50)
            print(f"instance refresh {refresh} started")
        seen: set[str] = set()
        for _ in finished_actions(sandbox, seen):
            pass  # the launches that brought the group up were shown as progress already
        while True:
            for event in finished_actions(sandbox, seen):
                print(event.line(began), flush=True)
            time.sleep(1)
    except KeyboardInterrupt:
        print("\nstopping the sandbox...")
        return 0
    finally:
        sandbox.stop()
