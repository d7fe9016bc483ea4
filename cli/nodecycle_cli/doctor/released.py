"""The doctor's look for cordons kept for a lifecycle that no longer exists.

A drain that keeps its node cordoned after the completion (its instance into a Running warm pool, a scheduled
maintenance or a root volume replacement ahead, a Spot instance stopped) clears its claim and marks the node
``nodecycle.io/released-for`` its lifecycle; that lifecycle's watch lifts the cordon once the instance is back in
service. The watch runs from the lifecycle's record: a record gone with its table (the stack deleted and deployed
again, docs/runbook.md) or with its stack (a stack removed whose groups this one took) leaves the cordon for ever, the
node out of every budget's scope and serving no pods while its instance is InService. No sweeper lifts it (each
clears its own owner's claims only, and the mark names no owner).

Listed here: the nodes so marked whose instance is InService in one of this stack's groups while this stack has no
open lifecycle of that mark. A node whose instance is leaving service (terminating, stopping into its warm pool) is
kept cordoned on purpose, and one whose lifecycle is still open is that watch's to lift. So is the node of a
disruption without a hook that the instance is to leave service by (UNTIL_IT_GOES): its cordon is kept while the
instance is still InService, its lifecycle done, with no watch to lift it. A warning: the operator who knows the
instance should serve lifts it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from typing import Any

from nodecycle.domain.model import Transition
from nodecycle.domain.ports.cluster import RELEASED_FOR_ANNOTATION
from nodecycle_cli.doctor.aws_checks import described_groups
from nodecycle_cli.doctor.findings import Finding

CHECK = "cluster.released-cordons"
SHOWN = 10  # nodes named in the finding (each with its command); the others counted
_PAGE = 500  # nodes a list call returns at most (a continue token for the rest)
# The lifecycles (a mark's second part: see model.record_id) whose cordon stays, by design, on a node whose instance
# is InService: a rebalance recommendation's cordon, kept until EC2 interrupts the instance (if it ever does), and a
# Spot interruption's drain, two minutes ahead of it (the instance InService in its group until then). Neither has a
# hook nor a watch after its release (cleanup._coming_back: a disruption that comes stays cordoned): done, its record
# is no longer open, and the doctor told the operator to uncordon a node nodecycle keeps out of scheduling on purpose.
UNTIL_IT_GOES = frozenset({Transition.REBALANCE.short, Transition.SPOT_INTERRUPTION.short})


def kept_cordons(
    api_client: Any, autoscaling: Any, groups: Collection[str], open_lifecycles: Collection[str]
) -> list[Finding]:
    """One finding: the cordoned nodes marked released for a lifecycle this stack no longer has, whose instance
    is back in service in one of ``groups``; or none. ``open_lifecycles``: the ids of this stack's open records."""
    from kubernetes import client

    marked = {
        name: (mark, mark.split("/", 1)[0])
        for name, mark in _marked(client.CoreV1Api(api_client))
        if mark not in open_lifecycles and _transition(mark) not in UNTIL_IT_GOES
    }
    serving = _in_service(autoscaling, {instance for _, instance in marked.values()}, set(groups))
    left = sorted((name, mark) for name, (mark, instance) in marked.items() if instance in serving)
    if not left:
        return [
            Finding.ok(
                CHECK,
                "no node of the stack's groups is kept cordoned for a lifecycle the stack no longer has",
            )
        ]
    named = "; ".join(f"{name} for {mark}" for name, mark in left[:SHOWN])
    more = f" and {len(left) - SHOWN} more" if len(left) > SHOWN else ""
    commands = "; ".join(
        f"kubectl annotate node {name} {RELEASED_FOR_ANNOTATION}- && kubectl uncordon {name}"
        for name, _ in left[:SHOWN]
    )
    # (kubectl's custom columns take the annotation's dots escaped)
    listing = (
        r" (the others: kubectl get nodes -o custom-columns=NAME:.metadata.name,"
        r"RELEASED:.metadata.annotations.nodecycle\.io/released-for)"
        if more
        else ""
    )
    return [
        Finding.warning(
            CHECK,
            f"{len(left)} node(s) cordoned and marked {RELEASED_FOR_ANNOTATION} a lifecycle the stack has no "
            f"open record of, their instance InService: {named}{more}",
            "the lifecycle whose watch would lift the cordon once the instance was back in service is gone (its "
            "table deleted with a stack deleted and deployed again, or a removed stack's): no one lifts it, and the "
            "node serves no pods while its instance runs, out of every budget's scope",
            f"lift each: {commands}{listing}; and, if nodecycle set it, kubectl label node NODE "
            "node.kubernetes.io/exclude-from-external-load-balancers-",
        )
    ]


def _transition(mark: str) -> str:
    """The short name of the transition of the lifecycle a mark names (``i-.../rebalance``); "" when it has none."""
    parts = mark.split("/")
    return parts[1] if len(parts) > 1 else ""


def _marked(core: Any) -> Iterator[tuple[str, str]]:
    """Each cordoned node marked released for a lifecycle: its name and the mark (the lifecycle's record id)."""
    token = None
    while True:
        page = core.list_node(limit=_PAGE, _continue=token)
        for node in page.items:
            annotations: Mapping[str, str] = node.metadata.annotations or {}
            mark = annotations.get(RELEASED_FOR_ANNOTATION)
            if mark and node.spec is not None and node.spec.unschedulable:
                yield node.metadata.name, mark
        token = page.metadata._continue
        if not token:
            return


def _in_service(autoscaling: Any, instances: set[str], groups: set[str]) -> set[str]:
    """The ``instances`` InService in one of ``groups``, as DescribeAutoScalingGroups lists the groups' instances
    and their lifecycle states (the call the doctor's other checks make: no permission more for an operator)."""
    if not instances or not groups:
        return set()
    return {
        instance["InstanceId"]
        for group in described_groups(autoscaling, sorted(groups))
        for instance in group.get("Instances", [])
        if instance["InstanceId"] in instances and instance["LifecycleState"] == "InService"
    }
