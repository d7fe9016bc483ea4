"""Running nodecycle end to end on the sandbox: the real handlers, the template's wiring, moto and the
in-memory API server. What the tests assert comes from the sandbox's records, not nodecycle's logs."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from kubernetes.client import CoreV1Api

from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle.domain.eip import SCRATCH
from nodecycle.domain.model import LifecycleRecord, Transition
from nodecycle_sandbox import Sandbox, SandboxOptions
from nodecycle_sandbox.aws.group import GroupSpec, HookSpec, WarmPoolSpec, default_hooks, wait_for
from nodecycle_sandbox.aws.records import LAUNCHING, TERMINATING, ActionRecord
from nodecycle_sandbox.kube import KubeServer

ROOT = Path(__file__).resolve().parents[3]
T = TypeVar("T")

# Quick but realistic: 1 s polls, a 20 s repair grace; per-test parameters override these.
FAST = {
    "DrainPollSeconds": "1",
    "BudgetRetrySeconds": "5",
    "ResumeGraceSeconds": "20",
    "DrainConcurrency": "4",
    "BudgetMaxUnavailable": "2",
    "BudgetMaxUnavailablePerZone": "1",
}

POOL = "allow-listed"  # the Elastic IP pool of the tests that have one
OWNER = "nodecycle"  # the stack's name: the sandbox's owner id

NODE_REMOVE_AFTER = 2.0  # seconds between an instance's end and its node's removal

WORKLOADS: dict[str, Any] = {
    "namespaces": ["shop"],
    "daemonSets": [{"name": "node-agent", "namespace": "kube-system"}],
    "deployments": [
        {
            "name": "web",
            "namespace": "shop",
            "replicas": 6,
            "shutdownSeconds": 0.3,
            "pdb": {"maxUnavailable": 1},
        },
        {
            "name": "api",
            "namespace": "shop",
            "replicas": 4,
            "shutdownSeconds": 0.5,
            "pdb": {"minAvailable": "50%"},
        },
    ],
}


def core_api(sandbox: Sandbox) -> CoreV1Api:
    """The official client on the sandbox's API server, as an operator would use it."""
    return CoreV1Api(sandbox.kube.api_client())


@contextmanager
def running(
    *,
    parameters: Mapping[str, str] | None = None,
    size: int = 3,
    hooks: tuple[HookSpec, ...] | None = None,
    workloads: Mapping[str, Any] | None = WORKLOADS,
    spot: bool = False,
    warm_pool: WarmPoolSpec | None = None,
    node_monitor_grace: float | None = None,
    node_lease_renew: float | None = None,
    capacity_rebalance: bool = False,
    **options: Any,
) -> Iterator[Sandbox]:
    """A sandbox with a group of ``size`` instances in service (their launch actions completed through the
    readiness gate) and the workloads scheduled on their nodes; ``spot``: all of them Spot instances;
    ``warm_pool``: the group's warm pool, put once the group has its instances; ``node_monitor_grace``: how long
    a node whose kubelet is gone stays Ready (the cluster's ``--node-monitor-grace-period``, 40 s unless set);
    ``node_lease_renew``: how often each live kubelet renews its Lease (10 s unless set: a test whose kubelet must
    stop moments after a renewal renews more often); ``capacity_rebalance``: the group's CapacityRebalance (a rebalance recommendation replaces the instance)."""
    group = GroupSpec(
        size=size,
        hooks=hooks or default_hooks(heartbeat_timeout=300),
        on_demand_percentage=0 if spot else None,
        warm_pool=warm_pool,
        capacity_rebalance=capacity_rebalance,
    )
    # A terminated instance's node outlives it a little, its kubelet gone at once, as on EKS (seconds to a
    # minute): a test that wants it gone at once, or much later, says so.
    options.setdefault("node_remove_after", NODE_REMOVE_AFTER)
    opts = SandboxOptions(
        root=ROOT, parameters={**FAST, **(parameters or {})}, group=group, node_ready_after=0.5, **options
    )
    kube = (
        None
        if node_monitor_grace is None and node_lease_renew is None
        else KubeServer(
            tls=True,
            node_monitor_grace_seconds=40.0 if node_monitor_grace is None else node_monitor_grace,
            node_lease_renew_seconds=10.0 if node_lease_renew is None else node_lease_renew,
        )
    )
    with Sandbox(opts, kube=kube) as sandbox:
        phase = sandbox.profile.phase
        if size:  # (a group of none: the test scales it once it has set the scene)
            with phase("in service"):
                if any(hook.transition == LAUNCHING for hook in group.hooks):
                    _wait_launches_ended(sandbox, size, timeout=90)
                sandbox.asg.wait_in_service(size, timeout=90)
        if workloads:
            with phase("workloads"):
                sandbox.kube.seed(dict(workloads))
                sandbox.kube.settle(timeout=30)
        with phase("tests"):
            yield sandbox


def _wait_launches_ended(sandbox: Sandbox, count: int, timeout: float) -> None:
    """Until ``count`` launch actions of the group have ended, read from the emulation's records over its pipe:
    what a start waits for most of its time (cold containers, the readiness gate), at a small fraction of the CPU
    of asking Auto Scaling (a DescribeAutoScalingGroups each poll, in this process and in the AWS process: about
    8 % of a core while a start waits). The group's instances in service are still what the caller waits for
    next (an abandoned launch ends too, and its replacement's launch after it)."""
    wait_for(
        lambda: sum(a.finished_at is not None for a in sandbox.asg.actions(transition=LAUNCHING)) >= count,
        timeout,
        f"{count} launch actions of {sandbox.asg.name} ended",
    )


@contextmanager
def swept_every_two_seconds(heartbeat_timeout: int, log_dir: Path | None = None) -> Iterator[Sandbox]:
    """Two instances in service under hooks that time out after ``heartbeat_timeout`` seconds (the launch hook's
    default result ABANDON, the terminate hook's CONTINUE), a 5 s heartbeat margin, and the sweeper every 2 s:
    what a test of the sweeper's repairs needs to see them within seconds. ``log_dir``: the functions' logs."""
    hooks = (
        HookSpec("nodecycle-launch", LAUNCHING, heartbeat_timeout, "ABANDON"),
        HookSpec("nodecycle-terminate", TERMINATING, heartbeat_timeout, "CONTINUE"),
    )
    with running(
        parameters={"HeartbeatMarginSeconds": "5"},
        settings={"NODECYCLE_SWEEP_INTERVAL_MINUTES": str(2 / 60)},
        schedule_interval=2.0,
        size=2,
        hooks=hooks,
        log_dir=log_dir,
    ) as sandbox:
        yield sandbox


def records(sandbox: Sandbox, stack: str | None = None) -> DynamoRecordStore:
    runner = sandbox.runner
    table = runner.table("LifecycleTable").name
    return DynamoRecordStore(table, ttl=timedelta(days=1), dynamodb=sandbox.client("dynamodb"))


def record_of(
    sandbox: Sandbox, instance_id: str, transition: Transition = Transition.TERMINATING
) -> LifecycleRecord:
    found = find_record(sandbox, instance_id, transition)
    assert found is not None, f"no lifecycle record for {instance_id}"
    return found


def find_record(
    sandbox: Sandbox, instance_id: str, transition: Transition = Transition.TERMINATING
) -> LifecycleRecord | None:
    """The lifecycle record of the instance's action, or None while there is none (yet)."""
    action = next(
        (
            a
            for a in sandbox.aws.actions()
            if a.instance_id == instance_id and a.transition == transition.value
        ),
        None,
    )
    if action is None:
        return None
    return records(sandbox).get(f"{instance_id}/{transition.short}/{action.token}")


def terminate_action(sandbox: Sandbox, instance_id: str) -> ActionRecord | None:
    return next(
        (a for a in sandbox.aws.actions() if a.instance_id == instance_id and a.transition == TERMINATING),
        None,
    )


def wait_terminated(sandbox: Sandbox, instance_id: str, timeout: float = 60) -> ActionRecord:
    def settled() -> ActionRecord | None:
        action = terminate_action(sandbox, instance_id)
        return action if action is not None and not action.active else None

    return wait_for(settled, timeout, f"the terminate action of {instance_id}")


def wait_finished(sandbox: Sandbox, instance_id: str, timeout: float = 30) -> LifecycleRecord:
    return wait_for(
        lambda: (r := record_of(sandbox, instance_id)).finished and r,
        timeout,
        f"the lifecycle of {instance_id}",
    )


def node_of(sandbox: Sandbox, instance_id: str) -> str:
    node = sandbox.kube.node_for_instance(instance_id)
    assert node is not None, f"no node for {instance_id}"
    return node


def pin(sandbox: Sandbox, node: str, namespace: str = "pinned") -> None:
    """A pod ``pinned`` on ``node`` whose PodDisruptionBudget never lets it go (until the budget is deleted)."""
    sandbox.kube.seed(
        {
            "namespaces": [namespace],
            "objects": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "pinned", "namespace": namespace, "labels": {"app": "pinned"}},
                    "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]},
                },
                {
                    "apiVersion": "policy/v1",
                    "kind": "PodDisruptionBudget",
                    "metadata": {"name": "pinned", "namespace": namespace},
                    "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "pinned"}}},
                },
            ],
        }
    )
    sandbox.kube.settle()


def steady(sandbox: Sandbox) -> bool:
    """Whether every instance of the group is in service, with its node."""
    return _steady(sandbox, sandbox.asg.instances())


def _steady(sandbox: Sandbox, states: Mapping[str, str]) -> bool:
    """Whether ``states`` (the group's instances, from one DescribeAutoScalingGroups) are all in service, with
    their nodes."""
    return bool(states) and all(
        s == "InService" and sandbox.kube.node_for_instance(i) for i, s in states.items()
    )


def wait_steady(sandbox: Sandbox, timeout: float = 120) -> None:
    """Wait for the group to be steady (see ``steady``): a replacement launching after an earlier test of a
    module's sandbox has a Ready node before its launch hook lets it in service, and a pod seeded then could
    land there, on no in-service instance's node."""
    wait_for(lambda: steady(sandbox), timeout, "every instance of the group in service with its node")


def wait_quiet(sandbox: Sandbox, timeout: float = 120) -> None:
    """Wait until nothing of an earlier test is in flight on a module's sandbox: the group steady, every
    lifecycle of the stack over, and no node left of an instance gone. An action completed is not its
    lifecycle's end: the cleanup after it (the node released, the budget slot given back: a write of the
    budget's ConfigMap) runs a moment later; and a terminated instance's node lingers (NODE_REMOVE_AFTER)."""
    owner = sandbox.env["NODECYCLE_OWNER_ID"]
    store = records(sandbox)

    def quiet() -> bool:
        # one DescribeAutoScalingGroups a poll, for both questions (each costs 5 ms of CPU in this process and
        # the AWS process)
        states = sandbox.asg.instances()
        return (
            _steady(sandbox, states)
            and len(sandbox.kube.objects("nodes")) == len(states)
            and next(iter(store.open_records(owner)), None) is None
        )

    wait_for(quiet, timeout, "the group steady, every lifecycle over and no node of an instance gone")


def held_by_a_budget(sandbox: Sandbox) -> tuple[str, str]:
    """A pod whose PodDisruptionBudget never allows its eviction (one replica, minAvailable 1), scheduled:
    its name, and the in-service instance whose node it runs on. Waits first for the group to be steady (see
    ``wait_steady``)."""
    wait_steady(sandbox)
    sandbox.kube.seed(
        {
            "deployments": [
                {"name": "singleton", "namespace": "shop", "replicas": 1, "pdb": {"minAvailable": 1}}
            ]
        }
    )
    sandbox.kube.settle()
    (pod,) = [
        p for p in sandbox.kube.objects("pods", "shop") if p["metadata"]["name"].startswith("singleton")
    ]
    node = pod["spec"]["nodeName"]
    instance = next((i for i in sandbox.asg.in_state("InService") if node_of(sandbox, i) == node), None)
    assert instance is not None, f"the singleton pod landed on {node}, no in-service instance's node"
    return pod["metadata"]["name"], instance


def pool_address(sandbox: Sandbox) -> str:
    """A new address in the pool ``POOL`` (tagged for it): its allocation id."""
    tags = [{"Key": "nodecycle:owner", "Value": OWNER}, {"Key": "nodecycle:pool", "Value": POOL}]
    spec = [{"ResourceType": "elastic-ip", "Tags": tags}]
    return str(sandbox.client("ec2").allocate_address(Domain="vpc", TagSpecifications=spec)["AllocationId"])


def waits_in_line(sandbox: Sandbox, instance: str) -> bool:
    """Whether the instance's launch found no address to be had (an empty pool, the quota used up) and waits
    in line for one."""
    record = find_record(sandbox, instance, Transition.LAUNCHING)
    return record is not None and bool((record.extra.get(SCRATCH) or {}).get("exhausted_since"))


class Line(NamedTuple):
    """The only address to be had, the instance in service that holds it, and a launch waiting for it."""

    address: str  # its allocation id
    holder: str
    waiting: str


def a_launch_waiting_for_an_empty_pool(sandbox: Sandbox, *, quota: bool = False) -> Line:
    """On a sandbox started with a group of none (``running(size=0)``) and Elastic IPs on: one instance in
    service holding the only address to be had, then a second launch waiting in line for one. The address:
    the pool's one (``EipMode=pool``, ``EipPoolName=POOL``), or with ``quota`` (``EipMode=allocate``) the one
    the instance allocated, the account's address quota then set to it."""
    ec2 = sandbox.client("ec2")
    pooled = None if quota else pool_address(sandbox)
    sandbox.asg.set_desired(1)
    (holder,) = sandbox.asg.wait_in_service(1, timeout=90)
    if quota:
        (owned,) = ec2.describe_addresses(Filters=[{"Name": "tag:nodecycle:owner", "Values": [OWNER]}])[
            "Addresses"
        ]
        assert owned.get("InstanceId") == holder, owned
        pooled = owned["AllocationId"]
        sandbox.aws.configure(address_quota=1)
    assert pooled is not None
    sandbox.asg.set_desired(2)
    waiting = wait_for(lambda: next(iter(set(sandbox.asg.instances()) - {holder}), None), 30, "a launch")
    wait_for(lambda: waits_in_line(sandbox, waiting), 60, "the launch to find no address to be had")
    return Line(pooled, holder, waiting)
