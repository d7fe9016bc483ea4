"""``nodecycle demo``: an instance refresh of a whole group, end to end, on the local sandbox.

Instances launch through nodecycle's launch hook (an Elastic IP each, completed once their node is Ready);
workloads under PodDisruptionBudgets are scheduled on them; then every instance is replaced at once, and
nodecycle drains the old nodes under the disruption budget (a cluster-wide and a per-zone limit),
releases their addresses and completes their hooks. The demo ends with checks made from what the sandbox
recorded (the API server's history, the emulated Auto Scaling actions, EC2's addresses), not from
nodecycle's own logs; its exit status says whether they all held. It also draws the refresh as a timeline
(one lane per node, grouped by zone, coloured by phase, with the budget's limits), as a PNG and an HTML
page in --timeline-dir.

With --spot the group is Spot capacity, the refresh replaces half of it at a time, and EC2 interrupts a node
the refresh has not reached yet while its drains fill the budget: nodecycle drains that node within the
warning on a slot the budget cannot refuse (the others count it), and the terminate hook Auto Scaling
starts for it afterwards completes at once. The checks then include the interruption's.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle.domain.model import LifecycleRecord
from nodecycle_cli import timeline
from nodecycle_cli.sandbox import STATE_DIR, add_sandbox_options, start
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.group import wait_for
from nodecycle_sandbox.aws.records import LAUNCHING, TERMINATING
from nodecycle_sandbox.checks import (
    completed_before_drained,
    cordon_peaks,
    last_pod_gone,
    pdb_breaches,
    released_at,
    unsettled,
)
from nodecycle_sandbox.kube import KubeServer

ZONE_LABEL = "topology.kubernetes.io/zone"


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "demo",
        help="an instance refresh on the local sandbox, end to end, with its checks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_sandbox_options(parser, nodes=9)
    parser.set_defaults(max_unavailable="3", run=run)
    parser.add_argument("--keep", action="store_true", help="leave the sandbox running afterwards (Ctrl-C)")
    parser.add_argument(
        "--spot",
        action="store_true",
        help="Spot capacity: EC2 interrupts a node in the middle of the refresh",
    )
    parser.add_argument(
        "--spot-warning",
        type=float,
        default=120.0,
        help="seconds between the interruption warning and the instance's end (default 120, as EC2)",
    )
    parser.add_argument(
        "--timeline-dir",
        type=Path,
        default=STATE_DIR,
        help=f"where to write timeline.png and timeline.html (default {STATE_DIR})",
    )


@dataclass
class Check:
    what: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"  {'PASS' if self.ok else 'FAIL'}  {self.what}: {self.detail}"


def run(args: argparse.Namespace) -> int:
    began = time.monotonic()
    print(f"1/4  starting the sandbox: {args.nodes} instances over 3 zones, Elastic IPs ({args.eip_mode})")
    sandbox, kube = start(args)
    try:
        show_fleet(sandbox, kube, began)
        old = set(sandbox.asg.in_state("InService"))
        kube.reset_history()
        print(
            f"\n2/4  instance refresh, minimum healthy 0%: all {len(old)} instances are replaced at once, and "
            f"nodecycle drains their nodes at most {args.max_unavailable} at a time, "
            f"{args.max_unavailable_per_zone} per zone"
        )
        refreshed = time.monotonic()
        spot: SpotInterruption | None = None
        if args.spot:
            refresh = sandbox.asg.start_refresh(min_healthy_percentage=50)
            spot = interrupt_mid_refresh(sandbox, kube, old, args)
        else:
            refresh = sandbox.asg.start_refresh(min_healthy_percentage=0)
        watch_refresh(sandbox, kube, old, refresh, refreshed)
        wait_for(
            lambda: all(r.finished for r in terminations(sandbox, old)), 60, "the lifecycles to finish", 0.25
        )
        took = time.monotonic() - refreshed
        print(f"     refresh done in {took:.1f} s")

        print("\n3/4  the scheduled sweeper runs once (it frees what a crash would have left behind)")
        sandbox.runner.fire_schedule("SweeperFunction")
        sweep = wait_for(lambda: _sweep_result(sandbox), 60, "the sweep", 0.25)
        print("     " + ", ".join(f"{name} {value}" for name, value in sorted(sweep.items())))

        print("\n4/4  checks, from the API server's history, the Auto Scaling emulation and EC2")
        checks = run_checks(args, sandbox, kube, old, spot_node=spot.node if spot else None)
        if spot is not None:
            checks.extend(spot_checks(sandbox, kube, spot))
        for check in checks:
            print(check.line())
        passed = all(check.ok for check in checks)
        png, page = draw_timeline(args, sandbox, kube, old)
        print(f"\ntimeline of the refresh: {png}\n                         {page}")
        print(
            f"\n{'all checks passed' if passed else 'SOME CHECKS FAILED'} ({time.monotonic() - began:.0f} s in all)"
        )
        if args.keep:
            print(
                f"the sandbox keeps running (kubeconfig {args.kubeconfig}, environment {args.env_file}); Ctrl-C"
            )
            while True:
                time.sleep(1)
        return 0 if passed else 1
    except KeyboardInterrupt:
        return 0
    finally:
        sandbox.stop()


@dataclass
class SpotInterruption:
    instance: str
    node: str
    warned_at: float
    warning: float


def interrupt_mid_refresh(
    sandbox: Sandbox, kube: KubeServer, old: set[str], args: argparse.Namespace
) -> SpotInterruption:
    """Once the refresh's drains fill the budget, EC2 interrupts a node the refresh has not reached yet."""
    limit = int(args.max_unavailable)
    wait_for(
        lambda: sum(1 for n in kube.objects("nodes") if (n.get("spec") or {}).get("unschedulable")) >= limit,
        120,
        "the refresh's drains",
        0.1,
    )
    terminating = {i for i, s in sandbox.asg.instances().items() if s.startswith("Terminating")}
    victim = sorted(old - terminating)[0]
    node = kube.node_for_instance(victim) or "?"
    sandbox.asg.interrupt_spot(victim, warning_seconds=args.spot_warning)
    warned_at = time.time()
    print(
        f"     EC2: Spot Instance Interruption Warning for {victim} ({node}): it ends in "
        f"{args.spot_warning:.0f} s, budget full or not",
        flush=True,
    )
    return SpotInterruption(victim, node, warned_at, args.spot_warning)


def spot_checks(sandbox: Sandbox, kube: KubeServer, spot: SpotInterruption) -> list[Check]:
    history = kube.history()
    emptied = last_pod_gone(history, spot.node)
    holders = [
        h
        for e in history
        if e.kind == "ConfigMap" and e.name == "nodecycle-budget" and not e.removed
        for h in json.loads((e.object.get("data") or {}).get("budget.json") or "{}").get("holders", [])
        if h["node"] == spot.node
    ]
    hook = next(
        (a for a in sandbox.aws.actions() if a.instance_id == spot.instance and a.transition == TERMINATING),
        None,
    )
    store = DynamoRecordStore(
        sandbox.runner.table("LifecycleTable").name,
        ttl=timedelta(days=1),
        dynamodb=sandbox.client("dynamodb"),
    )
    record = store.get(f"{spot.instance}/terminate/{hook.token}") if hook else None
    took = None if emptied is None else emptied - spot.warned_at
    return [
        Check(
            "Spot interruption",
            took is not None and took < spot.warning and bool(holders),
            f"{spot.node} emptied {took:.1f} s after the warning (of {spot.warning:.0f} s), on a budget slot "
            f"({'forced' if any(h.get('forced') for h in holders) else 'granted'})"
            if took is not None
            else f"{spot.node} still had pods",
        ),
        Check(
            "its terminate hook",
            hook is not None
            and hook.outcome == "completed"
            and record is not None
            and record.outcome == "drained-by:spot-interruption",
            f"completed {hook.finished_at - hook.started_at:.1f} s after it started, the node found drained"
            if hook is not None and hook.finished_at is not None
            else "not completed",
        ),
    ]


def show_fleet(sandbox: Sandbox, kube: KubeServer, began: float) -> None:
    addresses = {
        a.get("InstanceId"): a["PublicIp"] for a in sandbox.client("ec2").describe_addresses()["Addresses"]
    }
    for instance in sorted(sandbox.asg.in_state("InService")):
        node = kube.node_for_instance(instance)
        found = kube.get_object("nodes", node or "")
        zone = (found or {}).get("metadata", {}).get("labels", {}).get(ZONE_LABEL, "?")
        print(f"     {instance}  {zone}  {node}  public IP {addresses.get(instance, '-')}")
    pods = kube.objects("pods")
    budgets = kube.objects("poddisruptionbudgets")
    print(
        f"     {len(pods)} pods scheduled, {len(budgets)} PodDisruptionBudgets "
        f"({time.monotonic() - began:.0f} s: launches completed by the readiness gate)"
    )


def watch_refresh(sandbox: Sandbox, kube: KubeServer, old: set[str], refresh: str, since: float) -> None:
    """One line each time the set of cordoned nodes changes: which zones drain, how many wait, how many done."""
    last = ""
    while sandbox.asg.refresh_status(refresh) == "InProgress":
        actions = {
            a.instance_id: a for a in sandbox.asg.actions(transition=TERMINATING) if a.instance_id in old
        }
        active = {instance for instance, action in actions.items() if action.active}
        draining = Counter(
            (node["metadata"].get("labels") or {}).get(ZONE_LABEL, "?")
            for node in kube.objects("nodes")
            if (node.get("spec") or {}).get("unschedulable") and _instance_of(node) in active
        )
        done = len(actions) - len(active)
        zones = ", ".join(f"{zone[-2:]}:{count}" for zone, count in sorted(draining.items())) or "-"
        line = (
            f"draining {sum(draining.values())} ({zones})  waiting {len(active) - sum(draining.values())}  "
            f"done {done}/{len(old)}"
        )
        if line != last:
            print(f"     {time.monotonic() - since:6.1f}s  {line}", flush=True)
            last = line
        time.sleep(0.2)


def _instance_of(node: dict[str, Any]) -> str:
    return str((node.get("spec") or {}).get("providerID", "")).rsplit("/", 1)[-1]


def terminations(sandbox: Sandbox, old: set[str]) -> list[LifecycleRecord]:
    store = DynamoRecordStore(
        sandbox.runner.table("LifecycleTable").name,
        ttl=timedelta(days=1),
        dynamodb=sandbox.client("dynamodb"),
    )
    owner = sandbox.env["NODECYCLE_OWNER_ID"]
    return [r for r in store.scan(owner) if r.instance_id in old and r.transition.short == "terminate"]


def _sweep_result(sandbox: Sandbox) -> dict[str, int] | None:
    for invocation in sandbox.runner.journal.invocations():
        if invocation.function == "SweeperFunction" and invocation.finished_at:
            return dict(invocation.response or {}) if invocation.ok else {"failed": 1}
    return None


def draw_timeline(
    args: argparse.Namespace, sandbox: Sandbox, kube: KubeServer, old: set[str]
) -> tuple[Path, Path]:
    from nodecycle_cli.timeline_plot import write

    drawn = timeline.build(
        history=kube.history(),
        actions=sandbox.aws.actions(),
        instances=sandbox.aws.instances(),
        replaced=old,
        limit=int(args.max_unavailable),
        per_zone=int(args.max_unavailable_per_zone) if args.max_unavailable_per_zone else None,
        outcomes={r.instance_id: r.outcome or "" for r in terminations(sandbox, old)},
    )
    title = (
        f"Instance refresh of {len(drawn.lanes)} nodes, budget {args.max_unavailable} in all and "
        f"{args.max_unavailable_per_zone or 'no limit'} per zone"
    )
    return write(drawn, args.timeline_dir / "timeline.png", args.timeline_dir / "timeline.html", title)


def run_checks(
    args: argparse.Namespace, sandbox: Sandbox, kube: KubeServer, old: set[str], spot_node: str | None = None
) -> list[Check]:
    history = kube.history()
    actions = sandbox.aws.actions()
    # A Spot node takes its slot without room (the budget cannot refuse it): the limits are the voluntary
    # drains', which count it (its own check is separate)
    voluntary = [e for e in history if not (e.kind == "Node" and e.name == spot_node)]
    peak, zones = cordon_peaks(voluntary, released_at(history, actions))
    limit, per_zone = int(args.max_unavailable), int(args.max_unavailable_per_zone)
    ended = [a for a in actions if a.instance_id in old and a.transition == TERMINATING]
    launched = [a for a in actions if a.transition == LAUNCHING]
    early = completed_before_drained(history, ended)
    breaches = pdb_breaches(history)
    records = terminations(sandbox, old)
    outcomes = Counter(r.outcome for r in records)
    in_service = set(sandbox.asg.in_state("InService"))
    owner = sandbox.env["NODECYCLE_OWNER_ID"]
    addresses = sandbox.client("ec2").describe_addresses(
        Filters=[{"Name": "tag:nodecycle:owner", "Values": [owner]}]
    )
    ours = addresses["Addresses"]
    per_instance = Counter(a.get("InstanceId") for a in ours if a.get("InstanceId"))
    pooled = {a["PublicIp"] for a in ours if any(t["Key"] == "nodecycle:pool" for t in a.get("Tags", []))}
    # a pool address waiting in its pool is free by design; any other unassociated one leaked
    dangling = [a["PublicIp"] for a in ours if not a.get("AssociationId") and a["PublicIp"] not in pooled]
    free = len([a for a in ours if not a.get("AssociationId") and a["PublicIp"] in pooled])
    eip = args.eip_mode != "off"
    aws_calls = sandbox.aws.authorizations()
    kube_requests = kube.access.journal()
    refused = [e for e in aws_calls if not e.allowed] + [r for r in kube_requests if not r.allowed]
    return [
        Check(
            "budget, cluster-wide",
            peak <= limit,
            f"at most {peak} nodes being drained at once (limit {limit})",
        ),
        Check(
            "budget, per zone",
            all(value <= per_zone for value in zones.values()),
            ", ".join(f"{zone}: {value}" for zone, value in zones.items()) + f" (limit {per_zone})",
        ),
        Check("PodDisruptionBudgets", not breaches, f"{len(breaches)} moments below their minimum"),
        Check(
            "terminate hooks",
            len(ended) == len(old) and not unsettled(ended) and not early,
            f"{len(ended)} completed by nodecycle, {len(early)} before their node was empty, "
            f"{len(unsettled(ended))} timed out",
        ),
        Check(
            "launch hooks",
            not unsettled(launched),
            f"{len(launched)} completed once the node was Ready ({len(unsettled(launched))} timed out)",
        ),
        Check(
            "Elastic IPs",
            (not eip)
            or (set(per_instance) == in_service and set(per_instance.values()) == {1} and not dangling),
            f"{len(per_instance)} instances in service with one address each, {len(dangling)} unassociated"
            + (f", {free} free in the pool" if pooled else "")
            if eip
            else "off",
        ),
        Check(
            "lifecycle records",
            all(r.finished for r in records) and len(records) == len(old),
            ", ".join(f"{outcome} {count}" for outcome, count in outcomes.items()),
        ),
        Check(
            "least privilege",
            bool(aws_calls) and bool(kube_requests) and not refused,
            f"{len(aws_calls)} AWS calls checked against each function's role, {len(kube_requests)} "
            f"Kubernetes requests against deploy/rbac.yaml, {len(refused)} refused",
        ),
    ]
