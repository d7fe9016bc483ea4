"""``nodecycle sandbox``: nodecycle on this machine, with no AWS account and no cluster, until Ctrl-C.

It starts moto (with Auto Scaling lifecycle hooks), the in-memory Kubernetes API server and the runner that
delivers events and queues to the real handlers as Lambda would; creates an Auto Scaling group whose
instances register as nodes; seeds workloads; writes a kubeconfig and an environment file; then reports
each lifecycle action as it ends.
"""

from __future__ import annotations

import argparse
import shlex
import time
from pathlib import Path
from typing import Any

from nodecycle_sandbox import Sandbox, SandboxOptions
from nodecycle_sandbox.aws.group import GroupSpec
from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.scenario import finished_actions, project_root, split_seed

STATE_DIR = Path(".nodecycle")


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
    parser.add_argument("--max-unavailable", default="2", help="BudgetMaxUnavailable (default 2)")
    parser.add_argument(
        "--max-unavailable-per-zone", default="1", help="BudgetMaxUnavailablePerZone (default 1)"
    )
    parser.add_argument("--eip-mode", choices=("off", "allocate", "pool"), default="allocate")
    parser.add_argument(
        "--parameter",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="any other template parameter, e.g. DrainTimeoutSeconds=300 (repeatable)",
    )


def options_from(args: argparse.Namespace) -> SandboxOptions:
    parameters = {
        "BudgetMaxUnavailable": args.max_unavailable,
        "BudgetMaxUnavailablePerZone": args.max_unavailable_per_zone,
        "EipMode": args.eip_mode,
        "DrainPollSeconds": "2",
        "BudgetRetrySeconds": "10",
        "DrainConcurrency": "4",
    }
    for item in args.parameter:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--parameter needs NAME=VALUE, got {item!r}")
        parameters[name] = value
    args.log_dir.mkdir(parents=True, exist_ok=True)
    return SandboxOptions(
        root=project_root(),
        parameters=parameters,
        group=GroupSpec(size=args.nodes),
        node_ready_after=2.0,
        node_remove_after=5.0,
        log_dir=args.log_dir,
    )


def start(args: argparse.Namespace) -> tuple[Sandbox, KubeServer]:
    """Start the sandbox, bring the group in service, seed the workloads, write kubeconfig and env file."""
    extra_nodes, workloads = split_seed(args.cluster)
    kube = KubeServer(tls=True)
    sandbox = Sandbox(options_from(args), kube=kube).start()
    try:
        print(f"waiting for {args.nodes} instances to launch through nodecycle's launch hook...")
        sandbox.asg.wait_in_service(args.nodes, timeout=60 + 10 * args.nodes)
        kube.seed({"nodes": extra_nodes, **workloads})
        kube.settle(timeout=60)
        args.kubeconfig.parent.mkdir(parents=True, exist_ok=True)
        kube.write_kubeconfig(args.kubeconfig)
        write_env_file(sandbox, args.env_file, args.kubeconfig)
    except BaseException:
        sandbox.stop()
        raise
    return sandbox, kube


def write_env_file(sandbox: Sandbox, path: Path, kubeconfig: Path) -> None:
    """What a shell needs to act as an operator of the sandbox (nodecycle status, budget show, aws, kubectl)."""
    env = sandbox.env
    lines = {
        "AWS_ENDPOINT_URL": env["AWS_ENDPOINT_URL"],
        "AWS_ACCESS_KEY_ID": env["AWS_ACCESS_KEY_ID"],
        "AWS_SECRET_ACCESS_KEY": env["AWS_SECRET_ACCESS_KEY"],
        "AWS_DEFAULT_REGION": sandbox.options.region,
        "KUBECONFIG": str(kubeconfig.resolve()),
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
  environment     {args.env_file}   (source it for kubectl, aws, nodecycle status, nodecycle budget show)
  function logs   {args.log_dir}/

Try, in another shell:
  . {args.env_file}
  kubectl get nodes -L topology.kubernetes.io/zone
  nodecycle status
  nodecycle budget show
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
