"""Benchmark: Kubernetes requests and bytes per drained node, and per launched node, as the cluster grows.

nodecycle manages one node group; the cluster around it grows from 50 to 500 to 5,000 nodes that are not
nodecycle's (seeded into the API server, each with a DaemonSet pod and a static pod's mirror). At each size
one node of the group is launched (through the launch hook and the readiness gate: its kubelet registers
2 s after the instance starts, as on EKS, where it registers after boot) and then drained (10 pinned pods,
through the terminate hook), alone in the sandbox; the API server counts every request and the bytes of
every response. The stack uses the costliest budget settings: percent limits, overall and per zone, and
counting unavailable nodes, over the group's nodes (``BudgetNodeSelector``), so the budget must list them.

Target: flat (<= 1.10 between the smallest and the largest cluster), for requests and for bytes. The
counts are not timing-sensitive, except for the number of drain polls, which depends on how fast the pods
stop (as in the other call counts).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes.client import CoreV1Api

from benchmarks.harness import action_done, node_of, quiesce, terminate_and_settle
from benchmarks.harness import sandbox as start_sandbox
from benchmarks.records import BUDGET_FIELD_MANAGER, BUDGET_KEY, BUDGET_NAME, BUDGET_NAMESPACE, WRITTEN_KEY
from benchmarks.report import Result, Row
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.group import wait_for
from nodecycle_sandbox.aws.records import LAUNCHING
from nodecycle_sandbox.kube import SHUTDOWN_ANNOTATION
from nodecycle_sandbox.kube.builders import default_container

GROUP_LABEL = "bench.nodecycle.io/group"
ROLE_LABEL = "bench.nodecycle.io/role"
NAMESPACE = "bench"
PODS = 10
# Timings far from the polls' (production's DrainPollSeconds, 5 s: the readiness gate polls at 0, 5, 10 s and
# a drain at 0, 1, 3, 7, 12 s), so that a sandbox slowed by a large cluster does not change how many polls a
# lifecycle makes: the pods are gone at 4.5 s, the node registers at 2 s and is Ready at 2.5 s, and it stays
# in the cluster 10 s after its instance ends (the drain's clean-up finds it).
SHUTDOWN_SECONDS = 4.5
JOIN_AFTER = 2.0
REMOVE_AFTER = 10.0
ZONES = ("eu-west-1a", "eu-west-1b", "eu-west-1c")
TARGET = 1.10
PARAMETERS = {
    "BudgetMaxUnavailable": "50%",
    "BudgetMaxUnavailablePerZone": "50%",
    "BudgetCountUnavailable": "true",
    "BudgetNodeSelector": f"{GROUP_LABEL}=ours",
    "DrainPollSeconds": "5",
    # one drain container, warm before anything is counted (below the template's MinValue of 2, which the
    # sandbox is told to accept: see api_calls.py)
    "DrainConcurrency": "1",
}
# The same percent limits over every node of the cluster (no BudgetNodeSelector), counting none as
# unavailable: the budget lists every node's metadata, at most once a minute per container.
UNSCOPED = {**PARAMETERS, "BudgetNodeSelector": "", "BudgetCountUnavailable": "false"}


@dataclass(frozen=True)
class Measurement:
    nodes: int  # in the cluster
    pods: int
    launch_requests: Counter[str]  # "verb resource" -> requests, for one launch
    launch_bytes: Counter[str]  # "verb resource" -> response bytes
    drain_requests: Counter[str]
    drain_bytes: Counter[str]


def run(
    sizes: tuple[int, ...], log_dir: Path, *, scoped: bool = True, warm: int | None = None
) -> list[Measurement]:
    with start_sandbox(
        parameters=PARAMETERS if scoped else UNSCOPED, size=0, log_dir=log_dir, min_values=False, warm=warm
    ) as box:
        box.aws.plan_nodes(labels={GROUP_LABEL: "ours"}, join_after=JOIN_AFTER, remove_after=REMOVE_AFTER)
        box.kube.seed({"daemonSets": [{"name": "node-agent", "namespace": "kube-system"}]})
        box.kube.seed({"namespaces": [NAMESPACE]})
        # Two nodes of the group, and one drained before counting: the budget ConfigMap exists and the
        # drain container is warm, as after any earlier drain.
        box.asg.set_desired(2)
        box.asg.wait_in_service(2, timeout=120)
        terminate_and_settle(box, sorted(box.asg.in_state("InService"))[0])
        found = []
        others = 0
        for size in sizes:
            others = _grow(box, size, others)
            found.append(_measure(box))
    return found


def _grow(box: Sandbox, size: int, others: int) -> int:
    """Seed nodes that are not nodecycle's until the cluster has ``size`` nodes; returns how many there are."""
    wanted = size - len(box.kube.objects("nodes"))
    nodes = [_other_node(others + i) for i in range(max(0, wanted))]
    for start in range(0, len(nodes), 500):
        box.kube.seed({"nodes": nodes[start : start + 500]})
    box.kube.settle(timeout=120 + size / 20)
    return others + len(nodes)


def _other_node(i: int) -> dict[str, Any]:
    return {
        "name": f"ip-10-{200 + i // 62500}-{(i // 250) % 250}-{i % 250 + 1}.eu-west-1.compute.internal",
        "instanceId": f"i-0e{i:015x}",
        "zone": ZONES[i % 3],
        "labels": {ROLE_LABEL: "other"},
        "staticPods": [{"name": "kube-proxy", "namespace": "kube-system"}],
    }


def _measure(box: Sandbox) -> Measurement:
    server = box.kube
    quiesce(box)
    _forget_releases(box)
    before = set(box.asg.instances())
    server.reset_counters()
    box.asg.set_desired(len(before) + 1)
    instance = wait_for(lambda: _new_in_service(box, before), 120, "the launched node")
    wait_for(lambda: action_done(box, instance, LAUNCHING), 60, "the launch action")
    quiesce(box, quiet=1.5)
    launch_requests, launch_bytes = _counts(box)
    node = node_of(box, instance)
    server.seed({"namespaces": [NAMESPACE], "deployments": [_pinned(node)]})
    server.settle(timeout=120)
    nodes, pods = len(server.objects("nodes")), len(server.objects("pods"))
    quiesce(box)
    _forget_releases(box)
    # A new drain container, so that what a container caches (the budget's view of the nodes in scope, up
    # to a minute) is read again: each measurement pays for it, whatever came before.
    box.runner.recycle("DrainFunction")
    box.runner.warm("DrainFunction")
    server.reset_counters()
    terminate_and_settle(box, instance)
    drain_requests, drain_bytes = _counts(box)
    return Measurement(nodes, pods, launch_requests, launch_bytes, drain_requests, drain_bytes)


def _forget_releases(box: Sandbox) -> None:
    """Clear the budget's marks of earlier releases, as a holder TTL after them would: the document then has
    the same size at every measurement, whatever the benchmark drained before. Written as the stack writes
    (its fieldManager), without its note of what it last wrote (``budget.written``): by another manager, or with
    the note kept, the next write would take the document for one restored or edited by hand and list every node
    to seed it (a cost of such an edit, not of a drain)."""
    api = CoreV1Api(box.kube.api_client())
    try:
        configmap = api.read_namespaced_config_map(BUDGET_NAME, BUDGET_NAMESPACE)
        data = configmap.data or {}
        doc = json.loads(data[BUDGET_KEY])
        if doc.get("released"):
            doc["released"] = []
            kept = {key: value for key, value in data.items() if key != WRITTEN_KEY}
            configmap.data = {**kept, BUDGET_KEY: json.dumps(doc)}
            api.replace_namespaced_config_map(
                BUDGET_NAME, BUDGET_NAMESPACE, configmap, field_manager=BUDGET_FIELD_MANAGER
            )
    finally:
        api.api_client.close()


def _counts(box: Sandbox) -> tuple[Counter[str], Counter[str]]:
    requests = Counter({f"{verb} {resource}": n for (verb, resource), n in box.kube.counters().items()})
    sent = Counter({f"{verb} {resource}": n for (verb, resource), n in box.kube.bytes_sent().items()})
    return requests, sent


def _new_in_service(box: Sandbox, before: set[str]) -> str | None:
    new = set(box.asg.in_state("InService")) - before
    return next(iter(new), None)


def _pinned(node: str) -> dict[str, Any]:
    name = f"pinned-{node.split('.')[0]}"
    labels = {"app": name}
    return {
        "name": name,
        "namespace": NAMESPACE,
        "replicas": PODS,
        "labels": labels,
        "template": {
            "metadata": {"labels": labels, "annotations": {SHUTDOWN_ANNOTATION: str(SHUTDOWN_SECONDS)}},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "containers": [default_container()]},
        },
    }


def result(found: list[Measurement], unscoped: list[Measurement] | None = None) -> Result:
    small, large = found[0], found[-1]
    span = f"{large.nodes:,} vs {small.nodes:,} nodes"
    rows = []
    for what, requests, sent in (
        ("drained", "drain_requests", "drain_bytes"),
        ("launched", "launch_requests", "launch_bytes"),
    ):
        few, many = sum(getattr(small, requests).values()), sum(getattr(large, requests).values())
        rows.append(
            Row(
                f"K8s requests per {what} node, {span}",
                many,
                few,
                "",
                f"<= {TARGET:.2f}",
                many <= few * TARGET,
            )
        )
        few, many = sum(getattr(small, sent).values()), sum(getattr(large, sent).values())
        rows.append(
            Row(f"K8s bytes per {what} node, {span}", many, few, "", f"<= {TARGET:.2f}", many <= few * TARGET)
        )
    details = [
        f"a node group of nodecycle's in a cluster of {', '.join(f'{m.nodes:,}' for m in found)} nodes "
        f"({', '.join(f'{m.pods:,}' for m in found)} pods); the others are not nodecycle's; budget "
        f"{PARAMETERS['BudgetMaxUnavailable']} / {PARAMETERS['BudgetMaxUnavailablePerZone']} per zone of the "
        f"group's nodes (BudgetNodeSelector), counting unavailable ones; the drained node has {PODS} pods; its "
        f"kubelet registers {JOIN_AFTER:g} s after launch; DrainPollSeconds {PARAMETERS['DrainPollSeconds']}",
        *_breakdown("drain: requests", [(m.nodes, m.drain_requests) for m in found]),
        *_breakdown("drain: bytes sent", [(m.nodes, m.drain_bytes) for m in found]),
        *_breakdown("launch: requests", [(m.nodes, m.launch_requests) for m in found]),
        *_breakdown("launch: bytes sent", [(m.nodes, m.launch_bytes) for m in found]),
    ]
    if unscoped:
        few, many = unscoped[0], unscoped[-1]
        rows.append(
            Row(
                f"K8s bytes per drained node, percent of all nodes (unscoped), {many.nodes:,} vs {few.nodes:,}",
                sum(many.drain_bytes.values()),
                sum(few.drain_bytes.values()),
                "",
                "- (scope it)",
            )
        )
        details += [
            "the same drain with the limits over every node of the cluster (no BudgetNodeSelector), counting "
            "none unavailable: the budget lists every node's metadata (at most once a minute per container)",
            *_breakdown("unscoped drain: bytes sent", [(m.nodes, m.drain_bytes) for m in unscoped]),
        ]
    return Result("Kubernetes requests and bytes per node as the cluster grows", rows, details)


def _breakdown(title: str, columns: list[tuple[int, Counter[str]]]) -> list[str]:
    keys = sorted(set().union(*(counts for _, counts in columns)))
    width = max([len(title), *(len(key) + 2 for key in keys)]) + 2
    lines = [title.ljust(width) + "".join(f"{nodes:,} nodes".rjust(14) for nodes, _ in columns)]
    for key in [*keys, "total"]:
        figures = [sum(c.values()) if key == "total" else c[key] for _, c in columns]
        lines.append(f"  {key}".ljust(width) + "".join(f"{figure:,}".rjust(14) for figure in figures))
    return lines


def main() -> None:  # a development aid: python -m benchmarks.cluster_size 50 500
    import sys
    import tempfile

    sizes = tuple(int(arg) for arg in sys.argv[1:]) or (50, 500)
    began = time.monotonic()
    with tempfile.TemporaryDirectory() as scratch:
        found = result(
            run(sizes, Path(scratch) / "scoped"), run(sizes[:: len(sizes) - 1], Path(scratch), scoped=False)
        )
    print("\n".join(found.details))
    for row in found.rows:
        print(row)
    print(f"{time.monotonic() - began:.0f} s")


if __name__ == "__main__":
    main()
