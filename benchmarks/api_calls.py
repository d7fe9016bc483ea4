"""Benchmark 2: API calls per drained node, against ``kubectl drain`` of an identical node, at two cluster sizes.

Each measured node carries the same pinned pods (a Deployment whose pods select that node by hostname, so no
other pod lands there) and a DaemonSet pod. Ours: one terminate lifecycle, alone in the sandbox (counters reset
before, read once everything is quiet again): Kubernetes calls from the API server's request counters, AWS calls
from the runner's journal (each invocation's calls by service and operation). Baseline: the real kubectl
draining the other node, counted by the same server. Then the cluster grows to three times as many nodes, with
pods in proportion elsewhere, and both are measured again: the counts must not move.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness import node_of, quiesce, terminate_and_settle
from benchmarks.harness import sandbox as start_sandbox
from benchmarks.report import Result, Row
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.group import wait_for
from nodecycle_sandbox.kube import SHUTDOWN_ANNOTATION
from nodecycle_sandbox.kube.builders import default_container

ROLE_LABEL = "bench.nodecycle.io/role"  # filler nodes carry it; their pods select it, so they stay off ours
NAMESPACE = "bench"
SHUTDOWN_SECONDS = 0.5
KUBECTL_DRAIN = ("--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=120s")
# One drain container: the counts must not depend on whether a message lands in a cold one (a cold start
# adds eks:DescribeCluster). Every launch's readiness gate runs there first, so it is warm when we measure.
# The template's MinValue is 2 (SQS event source mappings take no less): the sandbox is told to accept 1 for
# this measurement, which is of calls per lifecycle, not of a deployment.
PARAMETERS = {"BudgetMaxUnavailable": "4", "BudgetMaxUnavailablePerZone": "2", "DrainConcurrency": "1"}
# Looked up once per warm container and cached (a hook's heartbeat timeout, the cluster's endpoint): whether a
# lifecycle pays for them depends on which container takes its event (the intake has several), not on the
# cluster. They are shown, but left out of the per-lifecycle figures that are compared.
ONCE_PER_CONTAINER = frozenset({"autoscaling.DescribeLifecycleHooks", "eks.DescribeCluster"})


@dataclass(frozen=True)
class Settings:
    pods: int  # drainable pods on each measured node, and pods per filler node
    nodes: int  # nodes in the cluster at the first measurement
    growth: int = 3  # the second measurement's cluster is this many times larger
    warm: int | None = None  # containers of each function started ahead (None: all; see harness.sandbox)


@dataclass(frozen=True)
class Measurement:
    nodes: int  # in the cluster when measured
    pods: int
    kube: Counter[str]  # "verb resource" -> requests
    aws: Counter[str]  # "service.Operation" -> calls
    invocations: Counter[str]  # function -> invocations
    kubectl: Counter[str] | None  # None: no kubectl on this machine

    @property
    def aws_per_lifecycle(self) -> Counter[str]:
        return Counter({call: n for call, n in self.aws.items() if call not in ONCE_PER_CONTAINER})


@dataclass(frozen=True)
class Kubectl:
    kubeconfig: Path
    cache_dir: Path  # its own discovery cache, warmed before counting (as any operator's would be)

    def __call__(self, *args: str) -> None:
        command = ["kubectl", "--kubeconfig", str(self.kubeconfig), "--cache-dir", str(self.cache_dir), *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
        if done.returncode:
            raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()}")


def run(settings: Settings, log_dir: Path) -> list[Measurement]:
    with start_sandbox(
        parameters=PARAMETERS, size=0, log_dir=log_dir, min_values=False, warm=settings.warm
    ) as box:
        kubectl = None
        if shutil.which("kubectl"):
            kubectl = Kubectl(box.kube.write_kubeconfig(log_dir / "kubeconfig"), log_dir / "kubectl-cache")
            kubectl("get", "nodes")
        box.kube.seed({"daemonSets": [{"name": "node-agent", "namespace": "kube-system"}]})
        ours, theirs = _grow(box, settings.nodes + 1, settings)
        _warm_up(box)
        measurements = [_measure(box, ours, theirs, kubectl)]
        ours, theirs = _grow(box, settings.nodes * settings.growth, settings)
        measurements.append(_measure(box, ours, theirs, kubectl))
    return measurements


def _grow(box: Sandbox, size: int, settings: Settings) -> tuple[str, str]:
    """Launch two nodes to measure on, with their pinned pods, then filler nodes with ``settings.pods`` pods
    each until the cluster has ``size`` nodes. Returns the two new instances (ours, kubectl's)."""
    server = box.kube
    before = set(box.asg.instances())
    box.aws.plan_nodes(labels={})
    box.asg.set_desired(len(before) + 2)
    targets = sorted(wait_for(lambda: _new_in_service(box, before, 2), 120, "two nodes to measure on"))
    fillers = size - len(server.objects("nodes"))
    box.aws.plan_nodes(labels={ROLE_LABEL: "filler"})
    box.asg.set_desired(len(before) + 2 + fillers)
    box.asg.wait_in_service(len(before) + 2 + fillers, timeout=60 + 3 * fillers)
    deployments = [
        _deployment(f"pinned-{instance}", settings.pods, {"kubernetes.io/hostname": node_of(box, instance)})
        for instance in targets
    ]
    deployments.append(_deployment(f"filler-{size}", settings.pods * fillers, {ROLE_LABEL: "filler"}))
    server.seed({"namespaces": [NAMESPACE], "deployments": deployments})
    server.settle(timeout=60)
    return targets[0], targets[1]


def _warm_up(box: Sandbox) -> None:
    """One filler's terminate lifecycle, not counted: it creates the budget ConfigMap, as any earlier drain
    would have, so that the two sizes are measured in the same steady state."""
    filler = sorted(set(box.asg.instances()) - _measured_instances(box))[0]
    terminate_and_settle(box, filler)


def _measure(box: Sandbox, ours: str, theirs: str, kubectl: Kubectl | None) -> Measurement:
    server = box.kube
    quiesce(box)
    nodes, pods = len(server.objects("nodes")), len(server.objects("pods"))
    server.reset_counters()
    mark = time.time()
    terminate_and_settle(box, ours)
    ours_kube = Counter({f"{verb} {resource}": n for (verb, resource), n in server.counters().items()})
    invocations = [i for i in box.runner.journal.invocations() if i.started_at >= mark]
    aws: Counter[str] = Counter()
    for invocation in invocations:
        aws.update(invocation.api_calls)
    theirs_kube = None
    if kubectl is not None:
        server.reset_counters()
        kubectl("drain", node_of(box, theirs), *KUBECTL_DRAIN)
        theirs_kube = Counter({f"{verb} {resource}": n for (verb, resource), n in server.counters().items()})
    return Measurement(nodes, pods, ours_kube, aws, Counter(i.function for i in invocations), theirs_kube)


def _new_in_service(box: Sandbox, before: set[str], count: int) -> set[str] | None:
    new = set(box.asg.in_state("InService")) - before
    return new if len(new) >= count else None


def _measured_instances(box: Sandbox) -> set[str]:
    """Instances whose node is not a filler: the measured ones."""
    found = set()
    for node in box.kube.objects("nodes"):
        if ROLE_LABEL not in node["metadata"].get("labels", {}):
            found.add(node["spec"]["providerID"].rsplit("/", 1)[-1])
    return found


def _deployment(name: str, replicas: int, selector: dict[str, str]) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "name": name,
        "namespace": NAMESPACE,
        "replicas": replicas,
        "labels": labels,
        "template": {
            "metadata": {"labels": labels, "annotations": {SHUTDOWN_ANNOTATION: str(SHUTDOWN_SECONDS)}},
            "spec": {"nodeSelector": selector, "containers": [default_container()]},
        },
    }


def result(measurements: list[Measurement], settings: Settings) -> Result:
    small, large = measurements
    ours, aws = sum(small.kube.values()), sum(small.aws_per_lifecycle.values())
    kubectl = None if small.kubectl is None else sum(small.kubectl.values())
    grown = f"{large.nodes} vs {small.nodes} nodes"
    rows = [
        Row(
            f"K8s API calls per drained node ({settings.pods} pods)",
            ours,
            kubectl,
            "",
            "<= kubectl drain",
            None if kubectl is None else ours <= kubectl,
        ),
        Row("AWS API calls per terminate lifecycle", aws, None, "", "small, constant"),
        # Not equal call for call: the node lifecycle controller taints a cordoned node (its own write), and a drain
        # whose read of the node came before that write reads it once more, at any size (as on a real cluster).
        Row(
            f"K8s calls per node, {grown}",
            sum(large.kube.values()),
            ours,
            "",
            "<= 1.05",
            sum(large.kube.values()) <= 1.05 * ours,
        ),
        Row(
            f"AWS calls per lifecycle, {grown}",
            sum(large.aws_per_lifecycle.values()),
            aws,
            "",
            "= 1.00",
            large.aws_per_lifecycle == small.aws_per_lifecycle,
        ),
    ]
    details = [
        f"measured node: {settings.pods} pods of a Deployment pinned to it (shutdown {SHUTDOWN_SECONDS:g} s, "
        f"no PDB) + 1 DaemonSet pod; clusters of {small.nodes} nodes / {small.pods} pods and "
        f"{large.nodes} nodes / {large.pods} pods; kubectl drain {' '.join(KUBECTL_DRAIN)}",
        f"invocations per lifecycle: {_inline(small.invocations)} ({_inline(large.invocations)} when larger)",
        *_breakdown(
            "Kubernetes",
            {
                f"ours {small.nodes}n": small.kube,
                f"ours {large.nodes}n": large.kube,
                f"kubectl {small.nodes}n": small.kubectl,
                f"kubectl {large.nodes}n": large.kubectl,
            },
        ),
        *_breakdown("AWS", {f"ours {small.nodes}n": small.aws, f"ours {large.nodes}n": large.aws}),
        "(*) once per warm container, cached: left out of the AWS figures compared above",
    ]
    return Result("API calls per drained node", rows, details)


def _breakdown(title: str, columns: dict[str, Counter[str] | None]) -> list[str]:
    """Calls by kind, one column per measurement."""
    present = {head: counts for head, counts in columns.items() if counts is not None}
    keys = sorted(set().union(*present.values()))
    width = max(len(key) for key in keys) + 6
    lines = [f"{title} calls".ljust(width) + "".join(head.rjust(14) for head in present)]
    for key in [*keys, "total"]:
        figures = [sum(c.values()) if key == "total" else c[key] for c in present.values()]
        label = f"  {key}{' (*)' if key in ONCE_PER_CONTAINER else ''}"
        lines.append(label.ljust(width) + "".join(str(figure).rjust(14) for figure in figures))
    return lines


def _inline(counts: Counter[str]) -> str:
    return ", ".join(f"{function} {n}" for function, n in sorted(counts.items()))
