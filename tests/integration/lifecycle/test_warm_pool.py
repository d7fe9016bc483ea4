"""A group's warm pool end to end: a launch into the pool completed at once, a launch out of it through the
readiness gate, and, with ReuseOnScaleIn, a scale in back into the pool drained first; in a Stopped pool, and
in a Running one, whose node stays Ready and so keeps its cordon until the instance leaves the pool."""

from __future__ import annotations

import functools
import json
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, NamedTuple

import pytest

from nodecycle.domain.drain.cleanup import POOL_IDLE, POOL_WATCH, POOL_WATCH_SECONDS
from nodecycle.domain.drain.common import NODE_SEEN
from nodecycle.domain.model import LifecycleRecord, Step, Transition, adopted_token
from nodecycle.domain.ports.cluster import RELEASED_FOR_ANNOTATION
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.group import AutoScalingGroup, GroupSpec, HookSpec, WarmPoolSpec
from nodecycle_sandbox.aws.records import LAUNCHING, TERMINATING, ActionRecord
from nodecycle_sandbox.checks import completed_before_drained, last_pod_gone, pdb_breaches
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import HistoryEntry
from tests.integration.lifecycle.harness import (
    WORKLOADS,
    find_record,
    node_of,
    records,
    running,
    wait_for,
    wait_quiet,
    wait_terminated,
)

pytestmark = pytest.mark.slow

SHUTDOWN_TAINT = "node.cloudprovider.kubernetes.io/shutdown"
# One instance warmed in the pool whatever the group's size (MaxGroupPreparedCapacity 0).
POOL_OF_ONE = WarmPoolSpec(min_size=1, max_group_prepared_capacity=0)
# No instance in the pool until the group of three scales in: then the pool keeps what it took back.
TAKES_BACK = WarmPoolSpec(min_size=0, max_group_prepared_capacity=3, reuse_on_scale_in=True)
# The same, its instances kept running in the pool (PoolState Running).
TAKES_BACK_RUNNING = WarmPoolSpec(
    min_size=0, max_group_prepared_capacity=3, reuse_on_scale_in=True, pool_state="Running"
)
# The same, its instances hibernated in the pool (PoolState Hibernated): resumed out of it, not booted
TAKES_BACK_HIBERNATED = WarmPoolSpec(
    min_size=0, max_group_prepared_capacity=3, reuse_on_scale_in=True, pool_state="Hibernated"
)
BOOT_SECONDS = 2.0  # an instance started out of the pool runs its kubelet again this long after
LOST_HEARTBEAT_TIMEOUT = 15  # the hooks' of the sweeper's adoption: it adopts within seconds


@pytest.fixture(scope="module")
def pooled() -> Iterator[Sandbox]:
    """Two instances in service, Elastic IPs on, and a warm pool of one."""
    with running(size=2, warm_pool=POOL_OF_ONE, parameters={"EipMode": "allocate"}) as sandbox:
        yield sandbox


def latest_action(sandbox: Sandbox, instance_id: str, transition: str) -> ActionRecord | None:
    found = [a for a in sandbox.aws.actions() if a.instance_id == instance_id and a.transition == transition]
    return max(found, key=lambda a: a.started_at) if found else None


def wait_in_pool(
    sandbox: Sandbox, state: str = "Warmed:Stopped", *, group: AutoScalingGroup | None = None
) -> str:
    """The instance waiting in the warm pool of ``group`` (the sandbox's unless given; one only), in ``state``."""
    pooled = group or sandbox.asg
    waiting = wait_for(
        lambda: [i for i, s in pooled.pool_instances().items() if s == state],
        60,
        f"an instance in the warm pool ({state})",
    )
    assert len(waiting) == 1
    return str(waiting[0])


def in_service_from_pool(sandbox: Sandbox, instance_id: str) -> bool:
    """Whether the group lists the instance InService, as DescribeAutoScalingGroups says; asked only once the
    emulation's record has it come into service since it last left the pool (an instance of the pool is InService
    only after it leaves it): a launch's seconds through the readiness gate are waited out on the records over the
    pipe, not on a DescribeAutoScalingGroups every 50 ms (5 ms of CPU each, in this process and the AWS process)."""
    came = any(
        h.instance_id == instance_id
        and h.pool_left_at
        and h.in_service_at is not None
        and h.in_service_at >= h.pool_left_at[-1]
        for h in sandbox.aws.instances()
    )
    return came and instance_id in sandbox.asg.in_state("InService")


def wait_launched_from_pool(sandbox: Sandbox, instance_id: str) -> ActionRecord:
    """The instance's launch out of the pool, in service (its action over)."""
    wait_for(lambda: in_service_from_pool(sandbox, instance_id), 60, f"{instance_id} in service")
    action = latest_action(sandbox, instance_id, LAUNCHING)
    assert action is not None
    assert (action.origin, action.destination) == ("WarmPool", "AutoScalingGroup")
    return action


def scaled_in_to_pool(
    sandbox: Sandbox, state: str = "Warmed:Stopped"
) -> tuple[str, ActionRecord, str, list[HistoryEntry]]:
    """The instance a scale-in sent to the pool (waiting there in ``state``), its terminate hook's action (a
    move from the group into the pool, completed by nodecycle after its node was drained), its node and the API
    server's history."""
    instance = wait_in_pool(sandbox, state)
    action = latest_action(sandbox, instance, TERMINATING)
    assert action is not None
    assert (action.origin, action.destination) == ("AutoScalingGroup", "WarmPool")
    assert (action.outcome, action.result) == ("completed", "CONTINUE")
    history = sandbox.kube.history()
    assert completed_before_drained(history, [action]) == []
    return instance, action, node_of(sandbox, instance), history


def latest_lifecycle(sandbox: Sandbox, instance_id: str) -> LifecycleRecord | None:
    """The record of the instance's latest terminate action (``find_record`` takes its first: on a module's
    sandbox, an instance back from the pool may have gone there before)."""
    action = latest_action(sandbox, instance_id, TERMINATING)
    return None if action is None else records(sandbox).get(f"{instance_id}/terminate/{action.token}")


def budget_entries_seen(history: list[HistoryEntry]) -> list[dict[str, Any]]:
    """Every holder and waiter the budget ConfigMap ever had."""
    return [
        entry
        for e in history
        if e.kind == "ConfigMap" and e.name == "nodecycle-budget" and not e.removed
        for document in [json.loads((e.object.get("data") or {}).get("budget.json") or "{}")]
        for entry in [*document.get("holders", []), *document.get("waiters", [])]
    ]


def current_holders(sandbox: Sandbox) -> set[str]:
    configmap = sandbox.kube.get_object("configmaps", "nodecycle-budget", "nodecycle") or {}
    document = json.loads((configmap.get("data") or {}).get("budget.json") or "{}")
    return {h["node"] for h in document.get("holders", [])}


def addresses_of(sandbox: Sandbox, instance_id: str) -> list[str]:
    """Elastic IPs associated with the instance or tagged for it (allocated, not yet released)."""
    found = sandbox.client("ec2").describe_addresses()["Addresses"]
    return [
        a["PublicIp"]
        for a in found
        if a.get("InstanceId") == instance_id
        or any(t["Key"] == "nodecycle:instance-id" and t["Value"] == instance_id for t in a.get("Tags", []))
    ]


def node_object(sandbox: Sandbox, node: str) -> dict[str, Any]:
    found = sandbox.kube.get_object("nodes", node)
    assert found is not None, f"no node {node}"
    return found


def cordoned(node: dict[str, Any]) -> bool:
    return bool(node["spec"].get("unschedulable"))


def ready(node: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions", [])
    )


def first_ready_since(history: list[HistoryEntry], node: str, since: float) -> float | None:
    return next(
        (
            e.time
            for e in history
            if e.kind == "Node" and e.name == node and e.time >= since and not e.removed and ready(e.object)
        ),
        None,
    )


def last_renewal(sandbox: Sandbox, node: str) -> float:
    """When the node's kubelet last renewed its Lease (its renewTime)."""
    lease = sandbox.kube.get_object("leases", node, "kube-node-lease")
    assert lease is not None, f"no Lease of {node}"
    return datetime.fromisoformat(lease["spec"]["renewTime"]).timestamp()


def lease_renewals(sandbox: Sandbox, node: str) -> list[float]:
    """When the node's kubelet renewed its Lease (as far as the history goes back)."""
    return [
        e.time
        for e in sandbox.kube.history()
        if e.kind == "Lease" and e.namespace == "kube-node-lease" and e.name == node and not e.removed
    ]


def workload_pods_on(sandbox: Sandbox, node: str) -> list[str]:
    """The pods on ``node`` that a drain evicts (not DaemonSets')."""
    return [
        p["metadata"]["name"]
        for p in sandbox.kube.objects("pods")
        if p["spec"].get("nodeName") == node
        and not any(o.get("kind") == "DaemonSet" for o in p["metadata"].get("ownerReferences") or [])
    ]


def test_an_instance_launched_into_the_pool_is_completed_at_once_without_a_slot_an_address_or_a_node(
    pooled: Sandbox,
) -> None:
    # Given a warm pool of one, put once the group was in service: its instance is launched into the pool
    # Then nodecycle completes the instance's launch action (a launch from EC2 into the pool) and Auto Scaling
    # stops it in the pool
    instance = wait_in_pool(pooled)
    action = latest_action(pooled, instance, LAUNCHING)
    assert action is not None
    assert (action.origin, action.destination) == ("EC2", "WarmPool")
    assert (action.outcome, action.result) == ("completed", "CONTINUE")
    record = find_record(pooled, instance, Transition.LAUNCHING)
    assert record is not None
    assert record.finished
    # without a budget slot, an Elastic IP, or a node: it never ran as a node of the cluster
    assert [e for e in budget_entries_seen(pooled.kube.history()) if e.get("instance_id") == instance] == []
    assert addresses_of(pooled, instance) == []
    assert pooled.kube.node_for_instance(instance) is None


def test_a_scale_out_from_the_pool_completes_the_launch_once_the_node_is_ready_and_leaves_it_schedulable(
    pooled: Sandbox,
) -> None:
    # Given the instance stopped in the warm pool
    instance = wait_in_pool(pooled)

    # When the group scales out by one
    pooled.asg.set_desired(3)

    # Then the instance leaves the pool, and nodecycle completes its launch action once its node is Ready
    action = wait_launched_from_pool(pooled, instance)
    assert (action.outcome, action.result) == ("completed", "CONTINUE")
    node = node_of(pooled, instance)
    became_ready = first_ready_since(pooled.kube.history(), node, action.started_at)
    assert became_ready is not None
    assert action.finished_at is not None
    assert became_ready <= action.finished_at
    # and the node takes pods, and the instance has its Elastic IP
    assert not cordoned(node_object(pooled, node))
    assert addresses_of(pooled, instance) != []


@pytest.fixture(scope="module")
def taking_back() -> Iterator[Sandbox]:
    """A group of three whose pool takes instances back (TAKES_BACK), Elastic IPs on: the sandbox of the tests of
    a scale-in into a stopped pool and into a hibernated one (one each was a sandbox's start more). Kubelets renew
    their Leases every second: the last renewal before a stop or a hibernation comes moments before it."""
    with running(
        size=3, warm_pool=TAKES_BACK, parameters={"EipMode": "allocate"}, node_lease_renew=1.0
    ) as sandbox:
        yield sandbox


@contextmanager
def pool_taking_back(sandbox: Sandbox, pool: WarmPoolSpec) -> Iterator[Sandbox]:
    """The sandbox of ``taking_back`` with its pool put as ``pool`` (PutWarmPool: the pool is empty between its
    tests, so no instance keeps the state of another), a fresh write history; afterwards, the group of three
    in service again and nothing in flight."""
    sandbox.asg.put_warm_pool(pool)
    sandbox.kube.reset_history()
    try:
        yield sandbox
    finally:
        sandbox.asg.set_desired(3)
        sandbox.asg.wait_in_service(3, timeout=90)
        wait_quiet(sandbox)


def test_a_scale_in_back_into_the_pool_drains_the_node_first_and_a_scale_out_brings_it_back_schedulable(
    taking_back: Sandbox,
) -> None:
    with pool_taking_back(taking_back, TAKES_BACK) as sandbox:
        # When the group scales in by one, with a pool that takes instances back
        sandbox.asg.set_desired(2)

        # Then the instance goes to the pool through the terminate hook (a move from the group into the pool)
        # (its node drained before, through the Eviction API, under the PodDisruptionBudgets)
        instance, action, node, history = scaled_in_to_pool(sandbox)
        evicted = {e.name for e in history if e.resource == "pods/eviction"}
        assert evicted != set()
        assert evicted <= {
            e.name for e in history if e.kind == "Pod" and e.object["spec"].get("nodeName") == node
        }
        assert pdb_breaches(history) == []
        emptied = last_pod_gone(history, node)
        assert emptied is not None
        assert action.finished_at is not None
        assert emptied <= action.finished_at
        # its budget slot taken for the drain, and given back once its cleanup watches the pool
        record = wait_for(
            lambda: (
                (r := latest_lifecycle(sandbox, instance)) is not None
                and r.step in (Step.CLEANUP, Step.DONE)
                and r.extra.get(POOL_WATCH)
                and r
            ),
            30,
            "the cleanup watching the pool",
        )
        assert node in {e["node"] for e in budget_entries_seen(history)}
        assert node not in current_holders(sandbox)
        # while in the pool nothing can be scheduled on the node: cordoned (released for this lifecycle), or
        # NotReady and tainted as shut down (the design lifts the cordon then), and no workload went there
        in_pool = node_object(sandbox, node)
        assert in_pool["metadata"]["annotations"].get(RELEASED_FOR_ANNOTATION) == record.id
        taints = {t["key"] for t in in_pool["spec"].get("taints") or []}
        assert cordoned(in_pool) or (not ready(in_pool) and SHUTDOWN_TAINT in taints)
        assert workload_pods_on(sandbox, node) == []
        # and its Elastic IP released before it went (a stopped instance in the pool would keep it)
        assert addresses_of(sandbox, instance) == []

        # When the group scales out again at once (the sandbox stops an instance in no time: its kubelet's last
        # renewal within seconds of the launch), the instance's kubelet back only once it has booted, while its node
        # object may still be Ready from before the stop (the node monitor grace period)
        sandbox.aws.plan_nodes(join_after=BOOT_SECONDS)
        stopped_since = last_renewal(sandbox, node)
        # (in a later second than that renewal: the launch's event tells its time to the second, as EventBridge's
        # does, so a renewal earlier in the launch's own second is one no gate can tell from a renewal since; a real
        # stop and a stay in the pool take many seconds)
        wait_for(
            lambda: time.time() >= math.floor(stopped_since) + 1, 5, "a second later than the last renewal"
        )
        sandbox.asg.set_desired(3)

        # Then the same instance comes back from the pool through the launch hook, whose action is completed
        # only once the node's kubelet is back (a Lease renewal between the action's start and its completion),
        # and its node is schedulable again, the lifecycle that took it to the pool over
        back = wait_launched_from_pool(sandbox, instance)
        assert (back.outcome, back.result) == ("completed", "CONTINUE")
        assert back.finished_at is not None
        assert [t for t in lease_renewals(sandbox, node) if back.started_at <= t <= back.finished_at] != []
        wait_for(lambda: not cordoned(node_object(sandbox, node)), 30, "the node uncordoned")
        finished = wait_for(
            lambda: (r := latest_lifecycle(sandbox, instance)) is not None and r.finished and r,
            30,
            "the lifecycle that took the instance to the pool",
        )
        assert finished.id == record.id
        assert RELEASED_FOR_ANNOTATION not in (
            node_object(sandbox, node)["metadata"].get("annotations") or {}
        )
        assert addresses_of(sandbox, instance) != []


def test_an_instance_resumed_from_a_hibernated_pool_on_the_same_boot_completes_its_launch_and_is_uncordoned(
    taking_back: Sandbox,
) -> None:
    with pool_taking_back(taking_back, TAKES_BACK_HIBERNATED) as sandbox:
        # Given an instance the group scaled in to its hibernated pool, its node drained and kept cordoned
        sandbox.asg.set_desired(2)
        instance, _, node, _ = scaled_in_to_pool(sandbox, "Warmed:Hibernated")
        before = node_object(sandbox, node)["status"]["nodeInfo"]["bootID"]

        # When the group scales out again at once (a short stay in the pool: the sandbox hibernates an instance in
        # no time, its kubelet's last renewal within seconds of the launch), the instance resumed (no boot: the same
        # boot id, its kubelet running on where it stopped) BOOT_SECONDS after it leaves the pool
        sandbox.aws.plan_nodes(join_after=BOOT_SECONDS)
        asleep_since = last_renewal(sandbox, node)
        # (in a later second than that renewal: the launch's event tells its time to the second, as EventBridge's
        # does, so a renewal earlier in the launch's own second is one no gate can tell from a renewal since; a real
        # hibernation and a stay in the pool take many seconds)
        wait_for(
            lambda: time.time() >= math.floor(asleep_since) + 1, 5, "a second later than the last renewal"
        )
        sandbox.asg.set_desired(3)

        # Then its launch is completed once its kubelet runs again (a Lease renewal since the action began), and
        # its node, on the boot from before the pool, is uncordoned
        back = wait_launched_from_pool(sandbox, instance)
        assert (back.outcome, back.result) == ("completed", "CONTINUE")
        assert back.finished_at is not None
        renewals = lease_renewals(sandbox, node)
        assert [t for t in renewals if back.started_at <= t <= back.finished_at] != [], (
            f"the launch ({back.started_at:.1f} to {back.finished_at:.1f}) completed before any Lease renewal since it "
            f"began; the last before the pool at {asleep_since:.1f}, renewals: {[round(t, 1) for t in renewals[-8:]]}"
        )
        wait_for(lambda: not cordoned(node_object(sandbox, node)), 60, "the node uncordoned")
        assert node_object(sandbox, node)["status"]["nodeInfo"]["bootID"] == before


def test_a_node_stopped_in_the_pool_is_uncordoned_once_not_ready_and_comes_back_ready() -> None:
    # Given a pool that takes instances back, and nodes that turn NotReady 3 s after their kubelet is gone
    with running(size=3, warm_pool=TAKES_BACK, node_monitor_grace=3) as sandbox:
        # When the group scales in by one, and the instance stays in the pool until its node is NotReady
        sandbox.asg.set_desired(2)
        instance = wait_in_pool(sandbox)
        node = node_of(sandbox, instance)

        # Then the pool's watch lifts the cordon of the NotReady node (the shutdown taint keeps pods off), and
        # the lifecycle that drained it is over
        wait_for(lambda: not cordoned(node_object(sandbox, node)), 30, "the stopped node uncordoned")
        stopped = node_object(sandbox, node)
        assert not ready(stopped)
        assert SHUTDOWN_TAINT in {t["key"] for t in stopped["spec"].get("taints") or []}
        record = wait_for(
            lambda: (r := find_record(sandbox, instance)) is not None and r.finished and r,
            30,
            "the lifecycle",
        )
        assert record.outcome == "drained"

        # When the group scales out, the instance's kubelet back once it has booted
        sandbox.aws.plan_nodes(join_after=BOOT_SECONDS)
        sandbox.asg.set_desired(3)

        # Then its launch out of the pool is completed once the node is Ready again, without the shutdown taint,
        # and schedulable
        back = wait_launched_from_pool(sandbox, instance)
        assert (back.outcome, back.result) == ("completed", "CONTINUE")
        became_ready = first_ready_since(sandbox.kube.history(), node, back.started_at)
        assert became_ready is not None
        assert back.finished_at is not None
        assert became_ready <= back.finished_at
        returned = node_object(sandbox, node)
        assert not cordoned(returned)
        assert SHUTDOWN_TAINT not in {t["key"] for t in returned["spec"].get("taints") or []}


def kept_in_pool_events(sandbox: Sandbox, node: str) -> list[dict[str, Any]]:
    return [
        e
        for e in sandbox.kube.objects("events", "default")
        if e["reason"] == "CordonKeptInWarmPool" and e["involvedObject"]["name"] == node
    ]


def first_uncordon_since(history: list[HistoryEntry], node: str, since: float) -> float | None:
    return next(
        (
            e.time
            for e in history
            if e.kind == "Node"
            and e.name == node
            and e.time >= since
            and not e.removed
            and not cordoned(e.object)
        ),
        None,
    )


def carries(invocation: Any, record_id: str) -> list[dict[str, Any]]:
    """The messages of ``record_id`` an SQS invocation carried."""
    bodies = [json.loads(r["body"]) for r in (invocation.event or {}).get("Records", [])]
    return [b for b in bodies if b.get("record_id") == record_id]


@pytest.fixture(scope="module")
def running_pool() -> Iterator[Sandbox]:
    """A group of three whose pool takes instances back and keeps them running (TAKES_BACK_RUNNING): the
    sandbox of the tests of a running pool, each of which scales the group in and has the instance wait in the
    pool (one each was a sandbox's start more: most of a test's time)."""
    with running(size=3, warm_pool=TAKES_BACK_RUNNING) as sandbox:
        yield sandbox


@pytest.fixture
def in_running_pool(running_pool: Sandbox) -> Iterator[Sandbox]:
    """The running pool's sandbox, with a fresh write history; after the test, put back as the next one needs it:
    no fault armed, the group of three in service again, its pool empty and nothing in flight."""
    sandbox = running_pool
    sandbox.kube.reset_history()
    yield sandbox
    sandbox.disarm_faults()
    sandbox.asg.set_desired(3)
    sandbox.asg.wait_in_service(3, timeout=90)
    wait_quiet(sandbox)


def test_a_scale_in_into_a_running_pool_keeps_the_ready_node_cordoned_until_its_scale_out_wakes_the_watch(
    in_running_pool: Sandbox,
) -> None:
    sandbox = in_running_pool

    # When the group scales in by one, with a running pool that takes instances back
    sandbox.asg.set_desired(2)

    # Then the instance goes to the pool through the terminate hook, its node drained before, and waits
    # there running
    instance, _, node, history = scaled_in_to_pool(sandbox, "Warmed:Running")
    assert {e.name for e in history if e.resource == "pods/eviction"} != set()
    assert pdb_breaches(history) == []
    record = wait_for(
        lambda: (
            (r := latest_lifecycle(sandbox, instance)) is not None
            and r.step is Step.CLEANUP
            and r.extra.get(POOL_WATCH)
            and r
        ),
        30,
        "the cleanup watching the pool",
    )
    # its node Ready (its kubelet runs on), yet cordoned, released for this lifecycle, and without workload
    in_pool = node_object(sandbox, node)
    assert ready(in_pool)
    assert cordoned(in_pool)
    assert in_pool["metadata"]["annotations"].get(RELEASED_FOR_ANNOTATION) == record.id
    assert workload_pods_on(sandbox, node) == []

    # When the watch has looked at it for longer than it waits for a stopped node's kubelet to go (the
    # clocks of the functions that run it moved past POOL_WATCH_SECONDS: the 15 minutes are not waited)
    skew = float(POOL_WATCH_SECONDS + 60)
    sandbox.arm_faults(
        [
            Fault("drain-clock", "clock-skew", target="DrainFunction", value=skew),
            Fault("wake-clock", "clock-skew", target="WakeFunction", value=skew),
        ],
        seed=1,
    )

    # Then it tells, once, that the node stays cordoned while its instance waits in the pool running, and
    # looks only once a minute from then on
    wait_for(lambda: kept_in_pool_events(sandbox, node), 60, "the CordonKeptInWarmPool Event")
    idle = wait_for(
        lambda: (r := latest_lifecycle(sandbox, instance)) is not None and r.extra.get(POOL_IDLE) and r,
        30,
        "the watch idle",
    )
    assert (idle.id, idle.finished) == (record.id, False)
    assert len(kept_in_pool_events(sandbox, node)) == 1
    assert cordoned(node_object(sandbox, node))

    # When the group scales out again
    sandbox.asg.set_desired(3)

    # Then the same instance comes back from the pool through the launch hook, whose action is completed
    back = wait_launched_from_pool(sandbox, instance)
    assert (back.outcome, back.result) == ("completed", "CONTINUE")
    wait_for(lambda: not cordoned(node_object(sandbox, node)), 60, "the node uncordoned")
    finished = wait_for(
        lambda: (r := records(sandbox).get(record.id)) is not None and r.finished and r,
        30,
        "the lifecycle that took the instance to the pool",
    )
    assert RELEASED_FOR_ANNOTATION not in (node_object(sandbox, node)["metadata"].get("annotations") or {})
    # and the cordon was lifted after the launch out of the pool began, by the wake-up its readiness gate
    # sent the watch through the wake lane (not by the watch's own look, a minute apart)
    uncordoned = first_uncordon_since(sandbox.kube.history(), node, back.started_at)
    assert uncordoned is not None
    # (the journal has an invocation once it has returned, a moment after what it did)
    wait_for(
        lambda: [
            i
            for i in sandbox.runner.journal.invocations(function="WakeFunction")
            if i.started_at <= uncordoned <= i.finished_at
            and any(m.get("wake") for m in carries(i, record.id))
        ],
        30,
        "the wake lane's invocation that lifted the cordon",
    )
    assert finished.outcome == "drained"


def test_a_node_waiting_in_a_running_pool_keeps_its_cordon_through_a_kubelet_outage(
    in_running_pool: Sandbox,
) -> None:
    # Given a running pool that takes instances back
    sandbox = in_running_pool
    # When the group scales in by one: the instance waits in the pool running, its node drained, Ready and
    # cordoned, watched by the lifecycle that took it there
    sandbox.asg.set_desired(2)
    instance, _, node, _ = scaled_in_to_pool(sandbox, "Warmed:Running")
    record = wait_for(
        lambda: (r := latest_lifecycle(sandbox, instance)) is not None and r.extra.get(POOL_WATCH) and r,
        30,
        "the cleanup watching the pool",
    )
    assert cordoned(node_object(sandbox, node))

    # When its kubelet is gone for a while (restarted, its runtime or its network down: the instance runs on,
    # in the pool), its node NotReady at once, until the watch has seen it NotReady
    sandbox.kube.kill_kubelet(node, grace_seconds=0)
    try:
        wait_for(lambda: not ready(node_object(sandbox, node)), 30, "the node NotReady")
        seen = wait_for(
            lambda: (
                (r := records(sandbox).get(record.id)) is not None
                and (r.finished or (r.extra.get(NODE_SEEN) or {}).get("ready") is False)
                and r
            ),
            60,
            "the watch's look at the NotReady node",
        )

        # Then the node keeps its cordon and its mark, the watch goes on: the kubelet may come back while the
        # instance is still out of service (a stopped instance's cannot, until it leaves the pool)
        assert not seen.finished
        assert cordoned(node_object(sandbox, node))
    finally:
        # (the kubelet back whatever happened: the module's sandbox serves the next test)
        sandbox.kube.revive_kubelet(node)

    # and once the kubelet is back, its node Ready again, still no workload goes to the instance in the pool
    wait_for(lambda: ready(node_object(sandbox, node)), 30, "the node Ready again")
    sandbox.kube.settle(timeout=30)
    back = node_object(sandbox, node)
    assert cordoned(back)
    assert back["metadata"]["annotations"].get(RELEASED_FOR_ANNOTATION) == record.id
    assert sandbox.asg.pool_instances().get(instance) == "Warmed:Running"
    assert workload_pods_on(sandbox, node) == []


# The group beside the sandbox's in the sweeper's adoptions below, its pool running (the sandbox's stopped). (The
# module's last tests: a module's fixture lasts until its last test, and this one's sweeps every 2 s.)
RUNNING_POOL_GROUP = "nodecycle-running-pool-workers"


class Adopted(NamedTuple):
    sandbox: Sandbox
    groups: dict[str, AutoScalingGroup]  # by its pool's state: Warmed:Stopped, Warmed:Running
    instances: dict[str, str]  # the instance each group scaled in, by its pool's state
    adopted: dict[str, LifecycleRecord]  # its adopted lifecycle, by its pool's state


@pytest.fixture(scope="module")
def adopted_scale_ins() -> Iterator[Adopted]:
    """Two groups of three the stack manages, with pools that take instances back, the sandbox's stopped
    (TAKES_BACK), RUNNING_POOL_GROUP's running (TAKES_BACK_RUNNING): each scaled in by one at once, while intake
    loses the events, each scale-in adopted by the sweeper. Yields once each adopted lifecycle's cleanup watches its
    pool (one sandbox for both pools: one each was a sandbox's start and an adoption's wait more)."""
    # Hooks that time out after 15 s (the terminate hook's default result CONTINUE), a sweeper every 2 s, and
    # DynamoDB failing every call of the intake function
    hooks = (
        HookSpec("nodecycle-launch", LAUNCHING, LOST_HEARTBEAT_TIMEOUT, "ABANDON"),
        HookSpec("nodecycle-terminate", TERMINATING, LOST_HEARTBEAT_TIMEOUT, "CONTINUE"),
    )
    with running(
        size=3,
        warm_pool=TAKES_BACK,
        hooks=hooks,
        parameters={"HeartbeatMarginSeconds": "5", "ManagedGroups": f"{GroupSpec.name},{RUNNING_POOL_GROUP}"},
        settings={"NODECYCLE_SWEEP_INTERVAL_MINUTES": str(2 / 60)},
        schedule_interval=2.0,
        workloads=None,
    ) as sandbox:
        beside = sandbox.add_group(
            GroupSpec(name=RUNNING_POOL_GROUP, size=3, hooks=hooks, warm_pool=TAKES_BACK_RUNNING)
        )
        beside.wait_in_service(3, timeout=90)
        sandbox.kube.seed(dict(WORKLOADS))
        sandbox.kube.settle(timeout=30)
        groups = {"Warmed:Stopped": sandbox.asg, "Warmed:Running": beside}
        sandbox.kube.reset_history()
        sandbox.aws.arm_faults(
            faults=[Fault("down", "aws-error", target="dynamodb.*")],
            seed=1,
            callers=[sandbox.runner.access_key("IntakeFunction")],
        )

        # Each group scales in by one: its instance waits in Warmed:Pending:Wait, which DescribeWarmPool alone
        # lists, and the event of its move into the pool does not become a record
        for group in groups.values():
            group.set_desired(2)
        instances = {
            state: wait_for(
                functools.partial(pool_instances, group), 30, f"an instance going to the pool ({state})"
            )
            for state, group in groups.items()
        }
        assert all(len(found) == 1 for found in instances.values()), instances

        # The sweeper adopts each with the plan of a move into the pool: the node drained, the action completed by
        # nodecycle (not by the hook's default result), its cleanup watching the pool
        actions = {
            state: wait_terminated(sandbox, found[0], timeout=60) for state, found in instances.items()
        }
        # (no record of the events' own)
        assert all(find_record(sandbox, found[0]) is None for found in instances.values())
        sandbox.aws.disarm_faults()
        ended = {
            state: (action.outcome, action.completed_by is not None) for state, action in actions.items()
        }
        assert ended == dict.fromkeys(actions, ("completed", True))
        adopted: dict[str, LifecycleRecord] = {}
        for state, action in actions.items():
            assert completed_before_drained(sandbox.kube.history(), [action]) == []
            adopted[state] = wait_for(
                functools.partial(adopted_watching_the_pool, sandbox, action),
                30,
                f"the adopted lifecycle watching the pool ({state})",
            )
            assert adopted[state].destination == "WarmPool"
        yield Adopted(sandbox, groups, {state: found[0] for state, found in instances.items()}, adopted)


def pool_instances(group: AutoScalingGroup) -> list[str]:
    return list(group.pool_instances())


def adopted_watching_the_pool(sandbox: Sandbox, action: ActionRecord) -> LifecycleRecord | None:
    """The lifecycle the sweeper adopted for ``action``, once its cleanup watches the pool."""
    found = records(sandbox).get(f"{action.instance_id}/terminate/{adopted_token(action.hook)}")
    return found if found is not None and found.extra.get(POOL_WATCH) else None


def test_the_sweeper_adopts_a_scale_in_into_the_pool_whose_event_intake_lost_and_drains_it_first(
    adopted_scale_ins: Adopted,
) -> None:
    # Given a pool that takes instances back, when the group scales in and intake loses the event, then the
    # sweeper adopts the move into the pool: drained first, completed by nodecycle, watching the pool (the fixture)
    sandbox = adopted_scale_ins.sandbox
    instance = adopted_scale_ins.instances["Warmed:Stopped"]
    assert wait_in_pool(sandbox, group=adopted_scale_ins.groups["Warmed:Stopped"]) == instance


def test_the_sweeper_adopts_a_scale_in_into_a_running_pool_whose_event_intake_lost_and_keeps_the_cordon(
    adopted_scale_ins: Adopted,
) -> None:
    # Given a running pool that takes instances back, when the group scales in and intake loses the event, then
    # the sweeper adopts the move into the pool (drained first, completed by nodecycle, watching the pool: the
    # fixture)
    sandbox = adopted_scale_ins.sandbox
    instance, adopted = (
        adopted_scale_ins.instances["Warmed:Running"],
        adopted_scale_ins.adopted["Warmed:Running"],
    )
    # And the instance waits in the pool running, its node Ready and cordoned for the adopted lifecycle
    assert (
        wait_in_pool(sandbox, "Warmed:Running", group=adopted_scale_ins.groups["Warmed:Running"]) == instance
    )
    node = node_object(sandbox, node_of(sandbox, instance))
    assert ready(node)
    assert cordoned(node)
    assert node["metadata"]["annotations"].get(RELEASED_FOR_ANNOTATION) == adopted.id
    current = records(sandbox).get(adopted.id)
    assert current is not None
    assert not current.finished
