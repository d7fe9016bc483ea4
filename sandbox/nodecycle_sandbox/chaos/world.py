"""The campaign's world: one sandbox kept running across scenarios, two stacks on one cluster, and the run
of one scenario on it, from a fresh group to quiescence and back to a clean slate.

Isolation between scenarios comes from fresh names, not fresh processes: every scenario gets its own
groups (managed by tag), its own node label and namespace, and starts from a quiescent world whose
history was just reset. Starting the sandbox (moto, the API server, two deployed stacks with warm
containers) costs more than a scenario; reusing it is what makes hundreds of scenarios affordable.
"""

from __future__ import annotations

import functools
import json
import logging
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from nodecycle_sandbox.aws.control import SANDBOX_ACCOUNT
from nodecycle_sandbox.aws.group import AutoScalingGroup, GroupSpec, HookSpec
from nodecycle_sandbox.aws.records import LAUNCHING, TERMINATING, ActionRecord, InstanceHistory
from nodecycle_sandbox.chaos.plan import Forgery, Scenario
from nodecycle_sandbox.faults import Fault, Firing
from nodecycle_sandbox.kube import HistoryEntry, KubeServer
from nodecycle_sandbox.runner.runner import Runner
from nodecycle_sandbox.sandbox import Sandbox, SandboxOptions

log = logging.getLogger(__name__)

SCENARIO_LABEL = "chaos.nodecycle.io/scenario"
OWNER_ANNOTATION = "nodecycle.io/owner"
IN_PROGRESS_ANNOTATION = "nodecycle.io/in-progress"
# The budget ConfigMap the campaign's stacks write: the template's BudgetNamespace default, as deploy/rbac.yaml ships
# it (tests/campaign/test_invariants.py holds the three together: named otherwise, the judges read a ConfigMap
# nobody writes and their budget checks cannot fail)
BUDGET = ("nodecycle", "nodecycle-budget", "budget.json")
OWNER_TAG = "nodecycle:owner"
POOL_TAG = "nodecycle:pool"
INSTANCE_TAG = "nodecycle:instance-id"
POOL_NAME = "chaos-pool"
POOL_SIZE = 24
HEARTBEAT_TIMEOUT = 30  # the groups' hooks; their global timeout is GLOBAL_FACTOR times this
GLOBAL_FACTOR = 6.0
QUIESCENCE_TIMEOUT = 240.0  # past every global timeout: an action still open then was never settled

RESUME_GRACE = 5.0  # a lifecycle whose step is this overdue is resumed by the sweeper

# Quick but faithful: 1 s polls and retries, a 5 s visibility timeout and resume grace (repairs within
# seconds), a 20 s drain timeout; the sweep grace and holder TTL at the smallest values the settings allow.
_STACK = {
    "ManagedByTag": "true",
    "DrainPollSeconds": "1",
    "BudgetRetrySeconds": "2",
    "ResumeGraceSeconds": str(round(RESUME_GRACE)),
    "WorkVisibilityTimeoutSeconds": "5",
    "HeartbeatMarginSeconds": "10",  # cold starts of several containers at once on 2 cores take seconds
    "DrainTimeoutSeconds": "20",
    "ForceGraceSeconds": "2",
    "PodGraceCapSeconds": "10",
    "BudgetMaxUnavailable": "2",
    "BudgetMaxUnavailablePerZone": "1",
    "BudgetHolderTtlSeconds": "200",
    "DrainConcurrency": "4",
    "ReadinessTimeoutSeconds": "30",
    "SweepGraceSeconds": "300",
    "EipWaitSeconds": "20",  # an empty pool waited for as long as a drain may take to give an address back
}
STACKS: dict[str, dict[str, str]] = {
    "a": {**_STACK, "OwnerId": "chaos-a", "EipMode": "allocate"},
    "b": {**_STACK, "OwnerId": "chaos-b", "EipMode": "pool", "EipPoolName": POOL_NAME},
}
# The sweepers' schedule, compressed like the rest: every 12 s (a real stack sweeps every SweepIntervalMinutes,
# whole minutes for EventBridge, so the handlers are told the interval through their environment). Under the
# hooks' 30 s heartbeat timeout and 10 s margin this keeps alive every action whose work message was lost and
# resumes it once it is ResumeGraceSeconds overdue, as the schedule does in AWS. The world fires it itself,
# from the moment a scenario acts until quiescence, so that the moments before and after stay its own.
SWEEP_INTERVAL = 12.0
SETTINGS = {"NODECYCLE_SWEEP_INTERVAL_MINUTES": str(SWEEP_INTERVAL / 60)}
LIMITS = {"total": 2, "per_zone": 1}
DRAIN_TIMEOUT = 20.0
FORCE_GRACE = 2.0
SWEEP_GRACE = 300.0
# The taint manager's default toleration of an unreachable node (kube-apiserver: 300 s), compressed below the
# drain timeout: a lost kubelet's pods are deleted, and then stuck Terminating, while a drain waits for them.
UNREACHABLE_TOLERATION = 8.0


def owner_of(stack: str) -> str:
    return STACKS[stack]["OwnerId"]


def lifecycle_outcome(item: Callable[[str], dict[str, Any] | None], action: ActionRecord) -> str | None:
    """The outcome of the lifecycle nodecycle ran for ``action`` (why it ended as it did), from the table's
    items (``item``: one by its id): its event's record, under its token; or, when the sweeper adopted the
    action (its event lost), the record it started, named by instance and hook (``adopted:<hook>``: Auto
    Scaling tells no token then). The sandbox emulates no warm pool: an instance has one action of each
    transition under a hook, so that record is this action's."""
    short = "launch" if action.transition == LAUNCHING else "terminate"
    for token in (action.token, f"adopted:{action.hook}"):
        found = item(f"{action.instance_id}/{short}/{token}")
        if found is not None:
            return found.get("outcome", {}).get("S")
    return None


def _item(dynamodb: Any, table: str, key: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = dynamodb.get_item(TableName=table, Key={"id": {"S": key}}).get("Item")
    return found


@dataclass
class AddressSeen:
    """One look at EC2's addresses of the campaign's owners: allocation id -> (instance or None, tags)."""

    at: float
    addresses: dict[str, tuple[str | None, dict[str, str]]]


@dataclass
class Observation:
    """What the world recorded while a scenario ran: the truth the invariants are judged on."""

    scenario: Scenario
    groups: dict[str, str]  # group name -> owner
    started_at: float
    acting_at: float  # when the faults were armed and the story began (workloads settled)
    quiescent: bool
    left_over: list[str]  # what was still unsettled at the quiescence deadline
    actions: list[ActionRecord]
    instances: list[InstanceHistory]
    history: list[HistoryEntry]
    addresses: list[AddressSeen]
    final_addresses: dict[str, tuple[str | None, dict[str, str]]]  # after the final (time-shifted) sweep
    outcomes: dict[str, str | None]  # action token -> the lifecycle record's outcome
    lost_kubelet: tuple[str, float] | None  # node, when
    firings: list[Firing]
    seconds: float = 0.0
    ec2_lagged: list[str] = field(default_factory=list)  # what the functions' lagging EC2 reads met
    notes: list[str] = field(default_factory=list)
    forged: list[str] = field(default_factory=list)  # the forged and replayed messages sent (plan.Forgery)
    phases: list[tuple[str, float]] = field(default_factory=list)  # where the seconds went

    @property
    def nodes_of(self) -> dict[str, str]:
        return {i.instance_id: i.node_name for i in self.instances}


class World:
    """Start once, run many scenarios, stop. ``layer_dir``: the handlers' copy of the product."""

    def __init__(
        self, *, root: Path, layer_dir: Path | None = None, log_dir: Path | None = None, warm_up: bool = True
    ) -> None:
        self._warm = warm_up
        kube = KubeServer(
            tls=True,
            cluster_name="chaos",
            node_monitor_grace_seconds=2.0,
            pod_start_seconds=0.2,
            unreachable_toleration_seconds=UNREACHABLE_TOLERATION,
        )
        self._logs: tempfile.TemporaryDirectory[str] | None = None
        if log_dir is None:  # the functions' logs would otherwise flood the terminal
            self._logs = tempfile.TemporaryDirectory(prefix="nodecycle-chaos-")
            log_dir = Path(self._logs.name)
        self.sandbox = Sandbox(
            SandboxOptions(
                root=root,
                stack_name="chaos-a",
                cluster_name="chaos",
                parameters=STACKS["a"],
                settings=SETTINGS,
                group=None,
                schedules_enabled=False,  # the scenarios fire the sweepers at their own moments
                node_ready_after=0.3,
                global_timeout_factor=GLOBAL_FACTOR,
                layer_dir=layer_dir,
                log_dir=log_dir,
                concurrency_cap=3,  # fewer containers to start on 2 cores; still 3 drains at once per stack
                min_values=False,  # time compressed: a 5 s visibility timeout (AWS: the functions' timeout)
            ),
            kube=kube,
        )
        self.runners: dict[str, Runner] = {}
        self.runs = 0

    def start(self) -> World:
        box = self.sandbox.start()
        try:
            self.runners = {"a": box.runner}
            self.runners["b"], _ = box.add_stack("chaos-b", parameters=STACKS["b"], settings=SETTINGS)
            ec2 = box.client("ec2")
            for _ in range(POOL_SIZE):
                ec2.allocate_address(
                    Domain="vpc",
                    TagSpecifications=[
                        {
                            "ResourceType": "elastic-ip",
                            "Tags": [
                                {"Key": POOL_TAG, "Value": POOL_NAME},
                                {"Key": OWNER_TAG, "Value": owner_of("b")},
                            ],
                        }
                    ],
                )
            if self._warm:
                self._warm_up()
        except BaseException:
            box.stop()
            raise
        return self

    def _warm_up(self) -> None:
        """A launch, a scale-in and a sweep per stack, not judged: the containers start once here (a cold
        start of several at once on 2 cores takes many seconds), not in the first scenarios."""
        box = self.sandbox
        box.aws.plan_nodes(labels={SCENARIO_LABEL: "warm-up"})
        groups = [
            box.add_group(
                GroupSpec(name=f"warm-up-{stack}", size=3, hooks=_hooks(), tags={OWNER_TAG: owner_of(stack)})
            )
            for stack in self.runners
        ]
        deadline = time.monotonic() + 180
        for group in groups:
            while len(group.in_state("InService")) < 3 and time.monotonic() < deadline:
                time.sleep(0.2)
            group.set_desired(0)
        for group in groups:
            while (
                group.instances() or any(a.active for a in group.actions())
            ) and time.monotonic() < deadline:
                time.sleep(0.2)
            group.autoscaling.delete_auto_scaling_group(AutoScalingGroupName=group.name, ForceDelete=True)
        for runner in self.runners.values():  # and the sweepers, which the scenarios fire at any moment
            before = len(runner.journal.invocations("SweeperFunction"))
            runner.fire_schedule("SweeperFunction")
            while (
                len(runner.journal.invocations("SweeperFunction")) <= before and time.monotonic() < deadline
            ):
                time.sleep(0.2)

    def stop(self) -> None:
        self.sandbox.stop()
        if self._logs is not None:
            self._logs.cleanup()

    def __enter__(self) -> World:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- one scenario ---------------------------------------------------------------------------------

    def run(self, scenario: Scenario, *, progress: Callable[[str], None] = lambda _: None) -> Observation:
        return ScenarioRun(self, scenario, progress).run()


class ScenarioRun:
    def __init__(self, world: World, scenario: Scenario, progress: Callable[[str], None]) -> None:
        self.world = world
        self.box = world.sandbox
        self.scenario = scenario
        world.runs += 1
        # The names of this run's groups, node label and namespace: a rerun (shrinking) gets new ones.
        self.tag = f"{scenario.name}-r{world.runs}"
        self.progress = progress
        self.groups: dict[str, AutoScalingGroup] = {}  # stack -> group
        self.autoscaling = self.box.client("autoscaling")
        self.ec2 = self.box.client("ec2")
        self.lost: tuple[str, float] | None = None
        self.forged: list[str] = []  # the forged messages sent, as the notes tell them
        self.refreshes: dict[str, str] = {}
        self.notes: list[str] = []
        self.phases: list[tuple[str, float]] = []
        self._mark = time.monotonic()

    def _phase(self, name: str) -> None:
        now = time.monotonic()
        self.phases.append((name, round(now - self._mark, 1)))
        self._mark = now

    def run(self) -> Observation:
        box, scenario = self.box, self.scenario
        begun = time.monotonic()
        for runner in self.world.runners.values():
            runner.journal.clear()
        box.kube.reset_history()
        box.aws.plan_nodes(labels={SCENARIO_LABEL: self.tag}, remove_after=scenario.node_removal)
        box.kube.pod_gc_quarantine_seconds = scenario.pod_gc_quarantine
        started = time.time()
        seen: list[AddressSeen] = []
        try:
            self._launch(1 if scenario.kind == "launch" else scenario.size)
            self._phase("launched")
            self._seed_workloads()
            self._phase("seeded")
            with self._watching_addresses(seen):
                if scenario.forgeries:  # (see plan.FORGERIES: the harsher reading of the API)
                    box.aws.configure(token_checked_against_instance=False, token_checked_against_group=False)
                box.arm_faults(scenario.faults, scenario.seed * 1000 + scenario.index)
                acting = time.time()
                with self._lagging_ec2() as lagged, self._sweeping_on_schedule():
                    self._act(acting)
                    quiescent, left = self._quiesce()
                self._phase("quiescent")
                firings = box.fault_firings()
                box.disarm_faults()
                if quiescent:
                    self._sweep_all()  # the sweepers have the last word, with no fault
                    quiescent, left = self._quiesce(timeout=30)
            self._phase("swept")
            final = self._final_addresses()
            self._phase("addresses")
            observation = Observation(
                scenario=scenario,
                groups={g.name: owner_of(stack) for stack, g in self.groups.items()},
                started_at=started,
                acting_at=acting,
                quiescent=quiescent,
                left_over=left,
                actions=[a for a in box.aws.actions() if a.group in self._group_names()],
                instances=[i for i in box.aws.instances() if i.group in self._group_names()],
                history=box.kube.history(),
                addresses=seen,
                final_addresses=final,
                outcomes=self._outcomes(),
                lost_kubelet=self.lost,
                firings=firings,
                ec2_lagged=lagged,
                notes=self.notes,
                forged=self.forged,
            )
        finally:
            box.disarm_faults()
            if scenario.forgeries:
                box.aws.configure(token_checked_against_instance=True, token_checked_against_group=True)
            self._clean_up()
            self._phase("cleaned")
        observation.phases = self.phases
        observation.seconds = time.monotonic() - begun
        return observation

    # -- set-up ---------------------------------------------------------------------------------------

    def _group_names(self) -> set[str]:
        return {g.name for g in self.groups.values()}

    def _launch(self, size: int) -> None:
        for stack in self.scenario.stacks:
            spec = GroupSpec(
                name=f"{self.tag}-{stack}",
                size=size,
                hooks=_hooks(),
                tags={OWNER_TAG: owner_of(stack)},
            )
            self.groups[stack] = self.box.add_group(spec)
        for group in self.groups.values():
            # launches go through nodecycle's launch hooks too: as long as their global timeout allows
            self._wait(
                functools.partial(_in_service, group, size), QUIESCENCE_TIMEOUT, f"{group.name} in service"
            )

    def _seed_workloads(self) -> None:
        scenario = self.scenario
        namespace = self.tag
        selector = {SCENARIO_LABEL: self.tag}
        replicas = scenario.replicas * len(scenario.stacks)
        pod_spec = {
            "nodeSelector": selector,
            "terminationGracePeriodSeconds": 10,
            "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
        }
        annotations = {"sandbox.nodecycle.io/shutdown-seconds": str(scenario.shutdown)}
        self.box.kube.seed(
            {
                "namespaces": [namespace],
                "objects": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "metadata": {"name": "web", "namespace": namespace},
                        "spec": {
                            "replicas": replicas,
                            "selector": {"matchLabels": {"app": "web"}},
                            "template": {
                                "metadata": {"labels": {"app": "web"}, "annotations": annotations},
                                "spec": pod_spec,
                            },
                        },
                    },
                    {
                        "apiVersion": "policy/v1",
                        "kind": "PodDisruptionBudget",
                        "metadata": {"name": "web", "namespace": namespace},
                        "spec": {"maxUnavailable": 2, "selector": {"matchLabels": {"app": "web"}}},
                    },
                    {
                        "apiVersion": "apps/v1",
                        "kind": "DaemonSet",
                        "metadata": {"name": "agent", "namespace": namespace},
                        "spec": {
                            "selector": {"matchLabels": {"app": "agent"}},
                            "template": {"metadata": {"labels": {"app": "agent"}}, "spec": pod_spec},
                        },
                    },
                ],
            }
        )
        self.box.kube.settle(timeout=30)

    # -- the story ------------------------------------------------------------------------------------

    def _act(self, started: float) -> None:
        scenario = self.scenario
        for stack, group in self.groups.items():
            if scenario.kind == "launch":
                group.set_desired(scenario.size)
            elif scenario.kind == "scale-in":
                group.set_desired(scenario.keep)
            elif scenario.kind in ("refresh", "two-owners"):
                self.refreshes[stack] = group.start_refresh(min_healthy_percentage=scenario.min_healthy)
            else:
                for instance in sorted(group.in_state("InService"))[: scenario.terminate]:
                    group.terminate(instance, decrement=False)
        events: list[tuple[float, str, Forgery | None]] = [(t, "sweep", None) for t in scenario.sweeps]
        if scenario.lost_kubelet_at is not None:
            events.append((scenario.lost_kubelet_at, "kubelet", None))
        events += [(f.at, "forge", f) for f in scenario.forgeries]
        settled = False
        for at, what, forgery in sorted(events, key=lambda event: event[:2]):
            while not settled and time.time() < started + at:
                settled = self._settled()
                if not settled:
                    time.sleep(min(0.5, max(0.0, started + at - time.time())))
            if forgery is not None:  # sent even once all settled: a replay comes when it comes
                self._forge(forgery)
            elif not settled:  # all settled before this moment: the last word is the final sweep's
                if what == "sweep":
                    self._fire_sweepers()
                else:
                    self._lose_a_kubelet(started)

    def _forge(self, forgery: Forgery) -> None:
        """Send what ``forgery`` names to an intake queue, as anyone allowed sqs:SendMessage on it can: a hook
        notification, well formed, that no hook sent for this action (design invariant 8). A forgery with no
        instance that fits (no completed launch to replay yet) is noted and not sent."""
        stack = sorted(self.groups)[forgery.pick % len(self.groups)]
        group = self.groups[stack]
        actions = [a for a in self.box.aws.actions() if a.group == group.name]
        in_service = sorted(group.in_state("InService"))
        target: tuple[str, str, str] | None = None  # instance, transition, token
        if forgery.kind in ("forged-terminate", "wrong-owner", "forged-launch") and in_service:
            transition = LAUNCHING if forgery.kind == "forged-launch" else TERMINATING
            target = (in_service[forgery.pick % len(in_service)], transition, str(uuid.uuid4()))
        elif forgery.kind in ("crossed", "other-group"):
            # (the live token of another instance's terminate action: this group's, or the other stack's group's)
            others = [g for s, g in sorted(self.groups.items()) if s != stack]
            # (a scenario of one stack has no other group: its own lends the token, as for crossed)
            lender = others[0] if forgery.kind == "other-group" and others else group
            named = sorted(set(in_service) | set(group.in_state("Terminating:Wait")))
            if named:
                instance = named[forgery.pick % len(named)]
                live = sorted(
                    (
                        a
                        for a in self.box.aws.actions()
                        if a.group == lender.name
                        and a.transition == TERMINATING
                        and a.active
                        and a.instance_id != instance
                    ),
                    key=lambda a: a.started_at,
                )
                if live:
                    target = (instance, TERMINATING, live[forgery.pick % len(live)].token)
        elif forgery.kind in ("replayed-launch", "replayed-terminate"):
            transition = LAUNCHING if forgery.kind == "replayed-launch" else TERMINATING
            done = [a for a in actions if a.transition == transition and not a.active]
            candidates = done or [a for a in actions if a.transition == transition]
            if candidates:
                action = sorted(candidates, key=lambda a: a.started_at)[forgery.pick % len(candidates)]
                target = (action.instance_id, transition, action.token)
        if target is None:
            self.forged.append(f"{forgery.describe()}: nothing to forge it for, not sent")
            return
        instance, transition, token = target
        if forgery.kind == "wrong-owner":  # to the queue of the stack that does not own the group
            stack = next(s for s in sorted(self.world.runners) if s != stack)
        hook = next(h.name for h in _hooks() if h.transition == transition)
        body = {
            "Origin": "AutoScalingGroup" if transition == TERMINATING else "EC2",
            "Destination": "EC2" if transition == TERMINATING else "AutoScalingGroup",
            "LifecycleHookName": hook,
            "AccountId": SANDBOX_ACCOUNT,
            "RequestId": str(uuid.uuid4()),
            "LifecycleTransition": transition,
            "AutoScalingGroupName": group.name,
            "Service": "AWS Auto Scaling",
            "Time": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
            "EC2InstanceId": instance,
            "LifecycleActionToken": token,
        }
        queue = self.world.runners[stack].queue("IntakeQueue").url
        self.box.client("sqs").send_message(QueueUrl=queue, MessageBody=json.dumps(body))
        self.forged.append(
            f"{forgery.describe()}: {instance} {transition.rsplit('_', 1)[-1]} to {stack}'s queue"
        )

    def _lose_a_kubelet(self, started: float) -> None:
        nodes = sorted(
            n["metadata"]["name"]
            for n in self.box.kube.objects("nodes")
            if n["metadata"].get("labels", {}).get(SCENARIO_LABEL) == self.tag
        )
        if nodes:
            node = nodes[self.scenario.index % len(nodes)]
            self.box.kube.kill_kubelet(node)
            self.lost = (node, time.time())

    def _lagging_ec2(self) -> AbstractContextManager[list[str]]:
        """The functions' EC2 reads behind its writes by the scenario's lag while the faults are armed (the
        world's own reads, the judges' included, see the latest state: they sign as the operator); the list is
        filled, once the block ends, with what the lag met."""
        if not self.scenario.ec2_lag:
            return nullcontext([])
        return self.box.lagging_ec2(self.scenario.ec2_lag)

    def _sweeping_on_schedule(self) -> AbstractContextManager[None]:
        """The sweepers' schedule, every SWEEP_INTERVAL from now until the block ends (the random sweeps of
        the scenario come on top, as an operator's manual runs would)."""
        return _repeating(SWEEP_INTERVAL, "chaos-schedule", self._fire_sweepers)

    def _fire_sweepers(self) -> None:
        for stack in self.scenario.stacks:
            self.world.runners[stack].fire_schedule("SweeperFunction")

    def _sweep_all(self) -> None:
        """Run every involved stack's sweeper once and wait for it to finish."""
        for stack in self.scenario.stacks:
            self._sweep(self.world.runners[stack])

    def _sweep(self, runner: Runner) -> None:
        before = len(runner.journal.invocations("SweeperFunction"))
        runner.fire_schedule("SweeperFunction")
        self._wait(lambda: len(runner.journal.invocations("SweeperFunction")) > before, 60, "a sweep")

    # -- quiescence -----------------------------------------------------------------------------------

    def _quiesce(self, timeout: float = QUIESCENCE_TIMEOUT) -> tuple[bool, list[str]]:
        deadline = time.monotonic() + timeout
        while True:
            left = self._unsettled()
            if not left:
                return True, []
            if time.monotonic() > deadline:
                return False, left
            time.sleep(0.25)

    def _settled(self) -> bool:
        return not self._unsettled()

    def _unsettled(self) -> list[str]:
        """Everything that still says "not done" in the truth: open actions, groups short of their
        target, nodes still annotated, budget entries of the scenario's instances, and the nodes of its
        terminated instances and their pods, until the cluster has forgotten them (the scenario's lingering):
        the invariants and the final sweep see what happens while they linger and when they go."""
        left: list[str] = []
        actions = [a for a in self.box.aws.actions() if a.group in self._group_names()]
        left += [
            f"action {a.instance_id} {a.transition.rsplit('_', 1)[-1]} open" for a in actions if a.active
        ]
        for stack, group in self.groups.items():
            states = group.instances()
            if stack in self.refreshes and group.refresh_status(self.refreshes[stack]) == "InProgress":
                left.append(f"{group.name}: instance refresh in progress")
            waiting = [i for i, s in states.items() if s != "InService"]
            if waiting:
                left.append(f"{group.name}: {len(waiting)} instances not in service")
            target = self.scenario.keep if self.scenario.kind == "scale-in" else self.scenario.size
            if len(states) != target:
                left.append(f"{group.name}: {len(states)} instances, {target} wanted")
        nodes: set[str] = set()
        for node in self.box.kube.objects("nodes"):
            nodes.add(node["metadata"]["name"])
            annotations = node["metadata"].get("annotations") or {}
            if OWNER_ANNOTATION in annotations or IN_PROGRESS_ANNOTATION in annotations:
                left.append(
                    f"node {node['metadata']['name']} still annotated by {annotations.get(OWNER_ANNOTATION)}"
                )
        instances = [i for i in self.box.aws.instances() if i.group in self._group_names()]
        gone = {i.node_name for i in instances if i.terminated_at is not None}
        left += [f"node {name} of a terminated instance still there" for name in sorted(gone & nodes)]
        left += [
            f"pod {pod['metadata']['name']} still bound to {pod['spec']['nodeName']}, which is gone"
            for pod in self.box.kube.objects("pods", self.tag)
            if (pod.get("spec") or {}).get("nodeName") in gone
        ]
        mine = {i.instance_id for i in instances}
        for kind, entry in budget_entries(self.box.kube):
            if entry.get("instanceId") in mine:
                left.append(f"budget {kind} {entry.get('node')} ({entry.get('owner')})")
        if self.forged:  # what a forged message does comes after its action settled: wait until it was taken
            left += self._intake_queues_left()
        return left

    def _intake_queues_left(self) -> list[str]:
        sqs = self.box.client("sqs")
        left = []
        for stack, runner in sorted(self.world.runners.items()):
            counts = sqs.get_queue_attributes(
                QueueUrl=runner.queue("IntakeQueue").url,
                AttributeNames=[
                    "ApproximateNumberOfMessages",
                    "ApproximateNumberOfMessagesNotVisible",
                    "ApproximateNumberOfMessagesDelayed",
                ],
            )["Attributes"]
            waiting = sum(int(n) for n in counts.values())
            if waiting:
                left.append(f"{stack}'s intake queue: {waiting} messages")
        return left

    @staticmethod
    def _wait(predicate: Callable[[], Any], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not within {timeout:.0f} s")
            time.sleep(0.1)

    # -- addresses ------------------------------------------------------------------------------------

    def _addresses(self) -> dict[str, tuple[str | None, dict[str, str]]]:
        owners = [owner_of(s) for s in self.world.runners]
        found = self.ec2.describe_addresses(Filters=[{"Name": f"tag:{OWNER_TAG}", "Values": owners}])
        return {
            a["AllocationId"]: (a.get("InstanceId"), {t["Key"]: t["Value"] for t in a.get("Tags", [])})
            for a in found["Addresses"]
        }

    @contextmanager
    def _watching_addresses(self, seen: list[AddressSeen]) -> Iterator[None]:
        missed: list[str] = []

        def look() -> None:
            try:
                seen.append(AddressSeen(time.time(), self._addresses()))
            except Exception as error:  # a look that failed is a look missed, not a reason to stop looking
                log.warning("looking at the addresses failed", exc_info=True)
                missed.append(f"{type(error).__name__}: {error}")

        with _repeating(0.5, "chaos-addresses", look):
            yield
        if missed:  # the addresses invariant saw less than usual: the report says so
            self.notes.append(f"{len(missed)} looks at the addresses failed (first: {missed[0]})")
        seen.append(AddressSeen(time.time(), self._addresses()))

    def _final_addresses(self) -> dict[str, tuple[str | None, dict[str, str]]]:
        """The addresses once the sweep grace has passed: a sweep with the sweepers' clocks moved past it
        (stack a allocates, so its sweeper is the one that must release what a crash left unassociated)."""
        addresses = self._addresses()
        loose = [
            a
            for a, (instance, tags) in addresses.items()
            if instance is None and POOL_TAG not in tags and tags.get(OWNER_TAG) == owner_of("a")
        ]
        if loose and "a" in self.scenario.stacks:
            runner = self.world.runners["a"]
            self.box.runner_faults.arm(
                [Fault("sweep-grace", "time-travel", "SweeperFunction", limit=1, value=SWEEP_GRACE + 60)],
                seed=0,
            )
            before = len(runner.journal.invocations("SweeperFunction"))
            runner.fire_schedule("SweeperFunction")
            self._wait(
                lambda: len(runner.journal.invocations("SweeperFunction")) > before, 60, "the late sweep"
            )
            self.box.runner_faults.disarm()
            addresses = self._addresses()
        return addresses

    # -- records --------------------------------------------------------------------------------------

    def _outcomes(self) -> dict[str, str | None]:
        """The lifecycle records' outcomes (why an action ended as it did), by action token."""
        dynamodb = self.box.client("dynamodb")
        found: dict[str, str | None] = {}
        for stack, group in self.groups.items():
            item = functools.partial(_item, dynamodb, self.world.runners[stack].table("LifecycleTable").name)
            for action in group.actions():
                found[action.token] = lifecycle_outcome(item, action)
        return found

    # -- back to a clean slate ------------------------------------------------------------------------

    def _clean_up(self) -> None:
        """Whatever the scenario left (a violation may leave a lot), so the next one starts clean."""
        try:
            for group in self.groups.values():
                self.autoscaling.delete_auto_scaling_group(AutoScalingGroupName=group.name, ForceDelete=True)
            mine = set(self._group_names())
            self._wait(
                lambda: all(i.terminated_at is not None for i in self.box.aws.instances() if i.group in mine),
                30,
                "the scenario's instances gone",
            )
            for allocation, (instance, tags) in self._addresses().items():
                if tags.get(INSTANCE_TAG) is None and instance is None:
                    continue
                with _unless_released(allocation):
                    if instance is not None:
                        self._disassociate(allocation)
                    if POOL_TAG in tags:
                        self.ec2.delete_tags(Resources=[allocation], Tags=[{"Key": INSTANCE_TAG}])
                    else:
                        self.ec2.release_address(AllocationId=allocation)
            for allocation, (instance, tags) in self._addresses().items():
                if instance is None and POOL_TAG not in tags:
                    with _unless_released(allocation):
                        self.ec2.release_address(AllocationId=allocation)
            nodes = {i.node_name for i in self.box.aws.instances() if i.group in mine}
            clear_budget(self.box.kube, nodes)
            self.box.kube.delete_namespace(self.tag)
        except Exception:
            log.exception("cleaning up after %s failed", self.tag)
            self.notes.append("clean-up failed: the next scenario may not start clean")

    def _disassociate(self, allocation: str) -> None:
        found = self.ec2.describe_addresses(AllocationIds=[allocation])["Addresses"][0]
        try:
            self.ec2.disassociate_address(AssociationId=found["AssociationId"])
        except (KeyError, ClientError):  # moto keeps some associations by instance only
            self.ec2.disassociate_address(PublicIp=found["PublicIp"])


@contextmanager
def _unless_released(allocation: str) -> Iterator[None]:
    """An address nodecycle released meanwhile: the lifecycles that follow EC2's word of the instances'
    termination (their state changes) may still be freeing addresses while the scenario is cleaned up."""
    try:
        yield
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "InvalidAllocationID.NotFound":
            raise
        log.info("address %s was released meanwhile", allocation)


def _hooks() -> tuple[HookSpec, ...]:
    return (
        HookSpec("nodecycle-launch", LAUNCHING, HEARTBEAT_TIMEOUT, "ABANDON"),
        HookSpec("nodecycle-terminate", TERMINATING, HEARTBEAT_TIMEOUT, "CONTINUE"),
    )


def _in_service(group: AutoScalingGroup, size: int) -> bool:
    return len(group.in_state("InService")) >= size


def budget_document(kube: KubeServer) -> dict[str, Any]:
    namespace, name, key = BUDGET
    found = kube.get_object("configmaps", name, namespace)
    if found is None:
        return {}
    loaded: dict[str, Any] = json.loads((found.get("data") or {}).get(key) or "{}")
    return loaded


def budget_entries(kube: KubeServer) -> list[tuple[str, dict[str, Any]]]:
    doc = budget_document(kube)
    return [("holder", h) for h in doc.get("holders", [])] + [("waiter", w) for w in doc.get("waiters", [])]


def clear_budget(kube: KubeServer, nodes: set[str]) -> None:
    """Take ``nodes``' entries out of the budget document (a violation may have left them there)."""
    namespace, name, key = BUDGET
    doc = budget_document(kube)
    if not doc:
        return
    kept = {
        **doc,
        "holders": [h for h in doc.get("holders", []) if h.get("node") not in nodes],
        "waiters": [w for w in doc.get("waiters", []) if w.get("node") not in nodes],
    }
    if kept != doc:
        kube.replace_config_map_data(namespace, name, {key: json.dumps(kept)})


@contextmanager
def _repeating(every: float, name: str, action: Callable[[], None]) -> Iterator[None]:
    """Run ``action`` every ``every`` seconds in a thread, from now until the block ends."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every):
            action()

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
