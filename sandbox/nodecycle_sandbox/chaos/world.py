"""The campaign's world: one sandbox kept running across scenarios, two stacks on one cluster, and the run
of one scenario on it, from a fresh group to quiescence and back to a clean slate.

Isolation between scenarios comes from fresh names, not fresh processes: every scenario gets its own
groups (managed by tag), its own node label and namespace, and starts from a quiescent world whose
history was just reset. Starting the sandbox (moto, the API server, two deployed stacks with warm
containers) costs more than a scenario; reusing it is what makes hundreds of scenarios affordable.
"""

from __future__ import annotations

import contextlib
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
from nodecycle_sandbox.aws.notifications import forged_hook_notification
from nodecycle_sandbox.aws.records import LAUNCHING, TERMINATING, ActionRecord, InstanceHistory
from nodecycle_sandbox.chaos.outages import WORK_UNDER_WAY_SETTLE, Outages, settle_work
from nodecycle_sandbox.chaos.plan import Forgery, Scenario
from nodecycle_sandbox.faults import WORLD_KINDS, Fault, Firing
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
BUDGET_RETRY = 2.0  # how often a node waiting for a budget slot asks again (BudgetRetrySeconds)

# Quick but faithful: 1 s polls and retries, a 5 s visibility timeout and resume grace (repairs within
# seconds), a 20 s drain timeout; the sweep grace and holder TTL at the smallest values the settings allow.
_STACK = {
    "ManagedByTag": "true",
    "DrainPollSeconds": "1",
    "BudgetRetrySeconds": str(round(BUDGET_RETRY)),
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
# while a scenario's groups launch and from the moment it acts until quiescence (the launches are judged too),
# so that the moments between and after stay its own.
SWEEP_INTERVAL = 12.0
SETTINGS = {"NODECYCLE_SWEEP_INTERVAL_MINUTES": str(SWEEP_INTERVAL / 60)}
LIMITS = {"total": 2, "per_zone": 1}
DRAIN_TIMEOUT = 20.0
FORCE_GRACE = 2.0
SWEEP_GRACE = 300.0
# The taint manager's default toleration of an unreachable node (kube-apiserver: 300 s), compressed below the
# drain timeout: a lost kubelet's pods are deleted, and then stuck Terminating, while a drain waits for them.
UNREACHABLE_TOLERATION = 8.0
# The hazards' look, and how long a hung runtime waits for a terminating instance's node before it takes any node
# of the scenario (a scale-in's or refresh's first terminations come within a second or two).
HAZARD_POLL = 0.25
HUNG_RUNTIME_PATIENCE = 5.0
# The kubelet's PLEG threshold where a scenario's runtime never hangs (its own: 3 min), and the taint an operator
# puts on a node judged shut down for good (Kubernetes' non-graceful node shutdown), with its look in the firings.
PLEG_THRESHOLD = 180.0
OUT_OF_SERVICE = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}
# What the cluster did by itself that the world records among the firings (neither a fault of the plan nor
# set by the world at its moment): a hung runtime's node posted NotReady, a lost kubelet's node tainted.
CLUSTER_KINDS = ("pleg-not-ready", "out-of-service")
# How far the late sweeps move the sweeper's clock ahead, each after the one before, until an address whose lock
# was lifted is released: past the sweep grace, then hours and days, past whatever back-off the sweeper keeps for
# an address it found locked (its schedule is the product's; the world depends on none).
LATE_SWEEPS = (SWEEP_GRACE + 60, 3600.0, 6 * 3600.0, 24 * 3600.0, 7 * 24 * 3600.0)
# How long the work a late sweep sends (a step it resumed) has to be handled, and how often the queues are looked at
LATE_SWEEP_SETTLE = 30.0
LATE_SWEEP_LOOK = 0.25
# At most how often the world moves on the queue's clock for the intake messages it retries (the template's
# maxReceiveCount is 5: a message that fails every delivery is in the dead-letter queue by then)
REDELIVERIES = 6


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


def swept(runner: Runner, fired: str | None, before: int) -> bool:
    """Whether the sweep of the scheduled event ``fired`` (its id) has ended: its invocation is in the journal. Not any
    sweep's end since: the sweeper runs one at a time, and the schedule's ticks queued behind a slow sweep (every
    SWEEP_INTERVAL, retried while throttled, as Lambda retries an asynchronous invocation) end first, one by one. An
    event without an id (a target's Input): any sweep ended since ``before`` were counted."""
    ended = runner.journal.invocations("SweeperFunction")
    if fired is None:
        return len(ended) > before
    return any(isinstance(i.event, dict) and i.event.get("id") == fired for i in ended)


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
    unset: list[str] = field(default_factory=list)  # the drawn outages never set, with why (Outages.unset)
    # Addresses AWS locked (eip-locked): allocation id -> (when locked, when the lock was lifted; None: never)
    locked: dict[str, tuple[float, float | None]] = field(default_factory=dict)
    phases: list[tuple[str, float]] = field(default_factory=list)  # where the seconds went
    # The deployed stacks: stack name -> owner id. A function's role is named after its stack (``<stack>-<logical
    # id>``), and the API server records the user of each write (its assumed-role session): who wrote what.
    stacks: dict[str, str] = field(default_factory=dict)
    # The scheduled maintenances of the story: instance id -> when EC2 starts it (its NotBefore, on this clock). No
    # story of the campaign schedules one yet; a crafted observation does.
    maintenances: dict[str, float] = field(default_factory=dict)

    @property
    def nodes_of(self) -> dict[str, str]:
        return {i.instance_id: i.node_name for i in self.instances}


class World:
    """Start once, run many scenarios, stop. ``layer_dir``: the handlers' copy of the product. ``one_stack``: stack a
    alone, for a test whose crafted scenarios are all of stack a (stack b's deployment and address pool cost a
    world's start seconds that such a test never uses)."""

    def __init__(
        self,
        *,
        root: Path,
        layer_dir: Path | None = None,
        log_dir: Path | None = None,
        warm_up: bool = True,
        one_stack: bool = False,
    ) -> None:
        self._warm = warm_up
        self._one_stack = one_stack
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
            if not self._one_stack:
                self._add_stack_b(box)
            if self._warm:
                self._warm_up()
        except BaseException:
            box.stop()
            raise
        return self

    def _add_stack_b(self, box: Sandbox) -> None:
        """Stack b, on the same cluster, and its pool of addresses."""
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
        missing = sorted(set(scenario.stacks) - set(self.runners))
        if missing:
            raise ValueError(
                f"scenario {scenario.name} needs stack(s) {', '.join(missing)}, which this world did not start "
                f"(started: {', '.join(sorted(self.runners))}; a world of one_stack=True starts stack a alone)"
            )
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
        # The hazards the world sets itself (faults.WORLD_KINDS): their firings, the runtimes it hung, the
        # addresses it locked (allocation id -> when locked, when lifted)
        self.hazard_firings: list[Firing] = []
        self.hung: list[str] = []
        self.locked: dict[str, tuple[float, float | None]] = {}
        # How far the intake's clock was moved on for the retried intake messages delivered early (seconds, the most
        # of any round): see _redeliver_retried and _late_sweep
        self.intake_travel = 0.0
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
        box.kube.pleg_threshold_seconds = scenario.pleg_threshold or PLEG_THRESHOLD
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
                outages = self._outages(time.monotonic())
                with (
                    self._lagging_ec2() as lagged,
                    self._sweeping_on_schedule(),
                    self._setting_hazards(outages.armed),
                    self._watching_the_cluster(outages.armed),
                    outages.timed(),
                ):
                    self._act(acting)
                    # (an intake message retried waits out its visibility timeout: see _redeliver_retried)
                    quiescent, left = self._quiesce(retried_waiting=True)
                self._phase("quiescent")
                hazards = [*self.hazard_firings, *outages.firings]
                firings = sorted([*box.fault_firings(), *hazards], key=lambda f: f.at)
                box.disarm_faults()
                # (without forgeries the world waits for no intake queue, and leaves their retries be)
                if quiescent and self.forged:
                    quiescent, left = self._redeliver_retried()
                if quiescent:
                    self._lift_locks()  # (AWS Support's answer: the sweepers must then release the addresses)
                    self._sweep_all()  # the sweepers have the last word, with no fault
                    quiescent, left = self._quiesce(timeout=30)
                if quiescent and any(f.kind == "work-replay" for f in scenario.faults):
                    # (hours later: nothing else runs then; what the replays do is judged with the rest)
                    replayed = len(outages.firings)
                    left = outages.replay()
                    firings += outages.firings[replayed:]
                    if not left:
                        quiescent, left = self._quiesce(timeout=30)
                    quiescent = quiescent and not left
                self.notes += outages.notes
                self._phase("swept")
            final, unsettled = self._final_addresses()
            self._phase("addresses")
            if unsettled:  # (work left in the queues would come due in the next scenarios)
                quiescent, left = False, [*left, *unsettled]
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
                unset=list(outages.unset),
                locked=dict(self.locked),
                stacks={runner.stack_name: owner_of(stack) for stack, runner in self.world.runners.items()},
            )
        finally:
            box.disarm_faults()
            self._end_hazards()
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
        # (the schedule runs meanwhile, as in AWS: a launch whose event reaches intake late is kept alive and
        # adopted by a sweep; without it, one kept alive by a stray sweep lapsed at its heartbeat timeout)
        with self._sweeping_on_schedule():
            for group in self.groups.values():
                # launches go through nodecycle's launch hooks too: as long as their global timeout allows
                self._wait(
                    functools.partial(_in_service, group, size),
                    QUIESCENCE_TIMEOUT,
                    f"{group.name} in service",
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
        body = forged_hook_notification(
            account=SANDBOX_ACCOUNT,
            group=group.name,
            hook=hook,
            instance_id=instance,
            transition=transition,
            token=token,
        )
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

    # -- hazards: faults the world sets itself (faults.WORLD_KINDS) ---------------------------------------

    @contextmanager
    def _setting_hazards(self, armed: float) -> Iterator[None]:
        """Set the scenario's hazards once their moment has come (``start`` seconds after ``armed``, monotonic,
        when the other faults were armed: their firings' clock), each once, while the block runs."""
        pending = [f for f in self.scenario.faults if f.kind in WORLD_KINDS]
        if not pending:
            yield
            return

        def look() -> None:
            elapsed = time.monotonic() - armed
            for fault in list(pending):
                if elapsed < fault.start:
                    continue
                try:
                    detail = self._set_hazard(fault, elapsed)
                except Exception:  # a look that failed is tried again at the next one
                    log.warning("setting %s failed", fault.describe(), exc_info=True)
                    continue
                if detail is not None:
                    pending.remove(fault)
                    self.hazard_firings.append(Firing(round(elapsed, 3), fault.id, fault.kind, detail))
                    self.notes.append(f"{fault.kind} at {elapsed:.1f}s: {detail}")  # (what the report shows)

        with _repeating(HAZARD_POLL, "chaos-hazards", look):
            yield
        if pending:
            self.notes.append(
                "hazards never set (nothing they fit): " + ", ".join(f.describe() for f in pending)
            )

    @contextmanager
    def _watching_the_cluster(self, armed: float) -> Iterator[None]:
        """While the block runs: the moment each hung runtime's kubelet posts its node NotReady (PLEG), and an
        operator's out-of-service taint on the lost kubelet's node ``out_of_service_after`` seconds after the
        loss, once the node is seen not Ready (never a node that still answers), recorded among the firings
        (``CLUSTER_KINDS``, their clock the faults' one: ``armed``, monotonic)."""
        after = self.scenario.out_of_service_after
        if not self.scenario.pleg_threshold and after is None:
            yield
            return
        seen: set[str] = set()
        tainted: list[str] = []

        def fired(kind: str, detail: str) -> None:
            elapsed = time.monotonic() - armed
            self.hazard_firings.append(Firing(round(elapsed, 3), kind, kind, detail))
            self.notes.append(f"{kind} at {elapsed:.1f}s: {detail}")

        def look() -> None:
            for node in self.hung:
                found = self.box.kube.get_object("nodes", node)
                if node not in seen and found is not None and _ready(found) == "False":
                    seen.add(node)
                    fired("pleg-not-ready", f"{node} NotReady: {_ready_message(found)}")
            if after is None or self.lost is None or tainted:
                return
            node, lost_at = self.lost
            found = self.box.kube.get_object("nodes", node)
            if found is None:
                tainted.append(node)  # (gone with its instance: nothing to taint)
                return
            if time.time() < lost_at + after or _ready(found) == "True":
                return
            try:
                self._taint_out_of_service(found)
            except Exception:  # (a fault of the plan, a conflict with the controllers: tried again next look)
                log.debug("the operator's out-of-service taint failed", exc_info=True)
                return
            tainted.append(node)
            fired(
                "out-of-service", f"{node} tainted {OUT_OF_SERVICE['key']} ({_ready(found)} for its kubelet)"
            )

        with _repeating(HAZARD_POLL, "chaos-cluster", look):
            yield

    def _taint_out_of_service(self, node: dict[str, Any]) -> None:
        """The operator's ``kubectl taint``, as a replace of the node read a moment ago (a PUT: the judges read
        a failed PATCH or GET of a node as a try of its drain; this is nobody's drain), refused on a conflict."""
        from kubernetes.client import CoreV1Api  # (the official client is slow to import: only when needed)

        spec = node.setdefault("spec", {})
        spec["taints"] = [*(spec.get("taints") or []), dict(OUT_OF_SERVICE)]
        api = CoreV1Api(self.box.kube.api_client())
        body: Any = node  # (the client sends a dict as it is, the node's fields as read)
        try:
            api.replace_node(node["metadata"]["name"], body)
        finally:
            api.api_client.close()

    def _set_hazard(self, fault: Fault, elapsed: float) -> str | None:
        """Set ``fault`` now if something fits it, and say what it did (None: nothing fits yet)."""
        mine = self._group_names()
        instances = {i.instance_id: i for i in self.box.aws.instances() if i.group in mine}
        terminating = sorted(
            {
                a.instance_id
                for a in self.box.aws.actions()
                if a.group in mine and a.transition == TERMINATING and a.active
            }
        )
        pick = round(fault.value)
        if fault.kind == "kube-hung-runtime":
            nodes = {n["metadata"]["name"] for n in self.box.kube.objects("nodes")}
            draining = [instances[i].node_name for i in terminating if instances[i].node_name in nodes]
            if not draining and elapsed < fault.start + HUNG_RUNTIME_PATIENCE:
                return None
            candidates = draining or sorted(
                i.node_name for i in instances.values() if i.terminated_at is None and i.node_name in nodes
            )
            if not candidates:
                return None
            node = candidates[pick % len(candidates)]
            self.box.kube.hang_runtime(node)
            self.hung.append(node)
            return f"hung runtime {node}{'' if draining else ' (no instance terminating yet)'}"
        # eip-locked: the address of an instance of stack a's group whose terminate action has begun
        group = self.groups.get("a")
        ours = [i for i in terminating if group is not None and instances[i].group == group.name]
        if not ours:
            return None
        instance = ours[pick % len(ours)]
        found = [
            allocation
            for allocation, (holder, tags) in self._addresses().items()
            if POOL_TAG not in tags and (holder == instance or tags.get(INSTANCE_TAG) == instance)
        ]
        if not found:
            return None  # (released already, or none yet: another terminating instance may come)
        allocation = found[0]
        self.box.aws.lock_address(allocation_id=allocation)
        self.locked[allocation] = (time.time(), None)
        still = (
            allocation in self._addresses()
        )  # (nodecycle may have released it between the look and the lock)
        return f"locked {allocation} of {instance}{'' if still else ' (released before the lock: no effect)'}"

    def _outages(self, armed: float) -> Outages:
        """The scenario's outages (chaos/outages.py), their clock started at ``armed`` (monotonic)."""
        return Outages(
            box=self.box,
            runners=self.world.runners,
            owners={stack: owner_of(stack) for stack in self.world.runners},
            stacks=self.scenario.stacks,
            faults=self.scenario.faults,
            armed=armed,
            budget=BUDGET,
            disruption_budget=(self.tag, "web"),  # (the one the scenario's Deployment is seeded with)
        )

    def _lift_locks(self) -> None:
        """AWS Support unlocks the addresses AWS locked."""
        for allocation, (locked_at, lifted) in self.locked.items():
            if lifted is None:
                self.box.aws.lock_address(allocation_id=allocation, locked=False)
                self.locked[allocation] = (locked_at, time.time())

    def _end_hazards(self) -> None:
        """The scenario is over: its hung runtimes answer again, and its addresses are unlocked (the clean-up
        releases what is left, and the next scenario starts with none locked)."""
        try:
            for node in self.hung:
                with contextlib.suppress(LookupError):  # (gone with its instance: nothing to answer again)
                    self.box.kube.hang_runtime(node, hung=False)
            for allocation in self.locked:
                self.box.aws.lock_address(allocation_id=allocation, locked=False)
        except Exception:
            log.exception("ending the hazards of %s failed", self.tag)
            self.notes.append("ending the hazards failed: the next scenario may not start clean")

    def _lagging_ec2(self) -> AbstractContextManager[list[str]]:
        """The functions' EC2 reads behind its writes by the scenario's lag while the faults are armed (the
        world's own reads, the judges' included, see the latest state: they sign as the operator); the list is
        filled, once the block ends, with what the lag met."""
        if not self.scenario.ec2_lag:
            return nullcontext([])
        return self.box.lagging_ec2(self.scenario.ec2_lag)

    def _sweeping_on_schedule(self) -> AbstractContextManager[None]:
        """The sweepers' schedule, every SWEEP_INTERVAL from now until the block ends (the random sweeps of
        the scenario come on top, as an operator's manual runs would): while the groups launch, and from the
        story's first act to quiescence."""
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
        fired = runner.fire_schedule("SweeperFunction")
        self._wait(functools.partial(swept, runner, fired, before), 60, "a sweep")

    # -- quiescence -----------------------------------------------------------------------------------

    def _quiesce(
        self, timeout: float = QUIESCENCE_TIMEOUT, *, retried_waiting: bool = False
    ) -> tuple[bool, list[str]]:
        """Wait until nothing is left unsettled (see _unsettled_parts), up to ``timeout``; ``retried_waiting``: an
        intake message that waits out its visibility timeout after a failed delivery counts as settled."""
        deadline = time.monotonic() + timeout
        while True:
            parts = self._unsettled_parts(retried_waiting=retried_waiting)
            first = next((part for part in parts if part), None)
            if first is None:
                return True, []
            if time.monotonic() > deadline:  # (the look read on: what is left, all of it)
                return False, [*first, *(item for part in parts for item in part)]
            time.sleep(0.25)

    def _settled(self) -> bool:
        return not any(self._unsettled_parts())

    def _unsettled_parts(self, *, retried_waiting: bool = False) -> Iterator[list[str]]:
        """Everything that still says "not done" in the truth: open actions, groups short of their
        target, nodes still annotated, budget entries of the scenario's instances, and the nodes of its
        terminated instances and their pods, until the cluster has forgotten them (the scenario's lingering):
        the invariants and the final sweep see what happens while they linger and when they go.

        Part after part, each read only once the one before has been taken: a look at whether anything is left
        stops at the first part with something in it. While a story runs its actions are open, and a look each
        quarter of a second that went on to the groups, the cluster's objects, the budget and the queues (a dozen
        calls, two of them over the pipe) took CPU from the story, on two cores, for what the first part told."""
        actions = [a for a in self.box.aws.actions() if a.group in self._group_names()]
        yield [f"action {a.instance_id} {a.transition.rsplit('_', 1)[-1]} open" for a in actions if a.active]
        left: list[str] = []
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
        yield left
        left = []
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
        left += cordons_left(self.box.kube.objects("nodes"), instances)
        left += [
            f"pod {pod['metadata']['name']} still bound to {pod['spec']['nodeName']}, which is gone"
            for pod in self.box.kube.objects("pods", self.tag)
            if (pod.get("spec") or {}).get("nodeName") in gone
        ]
        mine = {i.instance_id for i in instances}
        for kind, entry in budget_entries(self.box.kube):
            if entry.get("instanceId") in mine:
                left.append(f"budget {kind} {entry.get('node')} ({entry.get('owner')})")
        yield left
        if self.forged:  # what a forged message does comes after its action settled: wait until it was taken
            yield self._intake_queues_left(retried_waiting=retried_waiting)

    def _intake_queues_left(self, *, retried_waiting: bool = False) -> list[str]:
        """The messages still in the intake queues; ``retried_waiting``: less those whose last delivery failed,
        which wait out the queue's visibility timeout (180 s: the template's) before they are delivered again."""
        sqs = self.box.client("sqs")
        left = []
        retried = self._retried_intake() if retried_waiting else {}
        for stack, runner in sorted(self.world.runners.items()):
            counts = sqs.get_queue_attributes(
                QueueUrl=runner.queue("IntakeQueue").url,
                AttributeNames=[
                    "ApproximateNumberOfMessages",
                    "ApproximateNumberOfMessagesNotVisible",
                    "ApproximateNumberOfMessagesDelayed",
                ],
            )["Attributes"]
            invisible = int(counts.get("ApproximateNumberOfMessagesNotVisible", 0))
            # (those retried, invisible until their timeout is over, or moved to the dead-letter queue already)
            settled = min(invisible, len(retried.get(stack, [])))
            waiting = sum(int(n) for n in counts.values()) - settled
            if waiting:
                left.append(f"{stack}'s intake queue: {waiting} messages")
        return left

    def _retried_intake(self) -> dict[str, list[tuple[str, str, float]]]:
        """Stack -> the intake messages whose last delivery the function failed (retried: SQS delivers them
        again once the queue's visibility timeout from that receive is over), as (message id, its receipt handle
        then, when it was received)."""
        found: dict[str, list[tuple[str, str, float]]] = {}
        for stack, runner in sorted(self.world.runners.items()):
            last: dict[str, tuple[str, float, bool]] = {}
            for invocation in runner.journal.invocations("IntakeFunction"):
                if not invocation.records:
                    continue  # (EventBridge's events: no queue)
                handles = {
                    r.get("messageId"): r.get("receiptHandle")
                    for r in (invocation.event or {}).get("Records", [])
                    if isinstance(r, dict)
                }
                for message in invocation.records:
                    if message in last and last[message][1] > invocation.started_at:
                        continue
                    failed = message in invocation.failures
                    last[message] = (str(handles.get(message) or ""), invocation.started_at, failed)
            retried = [(m, handle, at) for m, (handle, at, failed) in last.items() if failed and handle]
            if retried:
                found[stack] = retried
        return found

    def _redeliver_retried(self) -> tuple[bool, list[str]]:
        """Once all else has settled (the faults disarmed), the intake messages that wait out their visibility
        timeout are delivered now rather than minutes later: the queue's clock moved on for each (its visibility
        changed to 0, as the administrator), and the intake's with it (time-travel: its invocations made the
        seconds skipped later). What the product does with them is then its answer to the same delivery that
        much later: taken, or retried again (and in the dead-letter queue after the template's five receives).
        Then quiescence, intake queues included."""
        sqs = self.box.client("sqs")
        since = 0.0  # (each round moves on the messages whose delivery failed since the round before)
        for _ in range(REDELIVERIES):
            now = time.time()
            moved: dict[str, set[str]] = {}
            skipped = 0.0
            for stack, messages in self._retried_intake().items():
                queue = self.world.runners[stack].queue("IntakeQueue")
                for message, handle, received in messages:
                    if received < since:
                        continue  # (moved on once: since in the dead-letter queue)
                    try:
                        sqs.change_message_visibility(
                            QueueUrl=queue.url, ReceiptHandle=handle, VisibilityTimeout=0
                        )
                    except ClientError:  # (delivered again meanwhile, or in the dead-letter queue)
                        continue
                    moved.setdefault(stack, set()).add(message)
                    skipped = max(skipped, received + queue.visibility_timeout - now)
            if not moved:
                break
            count = sum(len(m) for m in moved.values())
            self.intake_travel = max(self.intake_travel, skipped)
            self.notes.append(
                f"{count} retried intake messages delivered {skipped:.0f}s early (the queue's clock)"
            )
            self.box.runner_faults.arm(
                [Fault("redelivery", "time-travel", "IntakeFunction", limit=count, value=round(skipped))],
                seed=0,
            )
            try:
                self._wait(
                    functools.partial(self._redelivered, moved, now),
                    30,
                    "the retried intake messages delivered again",
                )
            except TimeoutError as error:
                return False, [str(error)]
            finally:
                self.box.runner_faults.disarm()
            since = now
        return self._quiesce(timeout=30)

    def _redelivered(self, moved: dict[str, set[str]], since: float) -> bool:
        """Whether each of ``moved`` was delivered again since ``since`` (its invocation over), or its queue is
        empty (the dead-letter queue took it)."""
        sqs = self.box.client("sqs")
        for stack, messages in moved.items():
            runner = self.world.runners[stack]
            again = {
                message
                for invocation in runner.journal.invocations("IntakeFunction")
                if invocation.started_at >= since
                for message in invocation.records
            }
            if messages <= again:
                continue
            counts = sqs.get_queue_attributes(
                QueueUrl=runner.queue("IntakeQueue").url,
                AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
            )["Attributes"]
            if sum(int(n) for n in counts.values()):
                return False
        return True

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

    def _final_addresses(self) -> tuple[dict[str, tuple[str | None, dict[str, str]]], list[str]]:
        """The addresses once the sweep grace has passed: a sweep with the sweepers' clocks moved past it
        (stack a allocates, so its sweeper is the one that must release what a crash left unassociated), and
        while an address AWS locked, its lock lifted since, is still there, later ones (LATE_SWEEPS); and what
        the late sweeps' work left unsettled (see _late_sweep)."""
        addresses = self._addresses()
        loose = [
            a
            for a, (instance, tags) in addresses.items()
            if instance is None and POOL_TAG not in tags and tags.get(OWNER_TAG) == owner_of("a")
        ]
        if not loose or "a" not in self.scenario.stacks:
            return addresses, []
        # (then, while an address whose lock was lifted is still there, later and later ones: see LATE_SWEEPS)
        for travel in LATE_SWEEPS:
            unsettled = self._late_sweep(travel)
            addresses = self._addresses()
            if unsettled:
                return addresses, unsettled
            if not any(
                lifted is not None and allocation in addresses
                for allocation, (_, lifted) in self.locked.items()
            ):
                break
        return addresses, []

    def _late_sweep(self, travel: float) -> list[str]:
        """One sweep of stack a's sweeper ``travel`` seconds later (time-travel: its clock and deadline moved on),
        and the work it sends handled as late: every function's clock moved on by as much until stack a's work
        queues are empty again, as a replay's (outages.py). A step the sweep resumes is due at the sweeper's now:
        handled by functions whose clocks had not moved, it was due that far ahead, and they sent it again
        delayed (SQS's 900 s at most, then again), messages that outlived the scenario and came due in the next
        ones (seed 3's scenario 2 found them in a's EipQueue after its replays). So the clocks move only once the
        work under way has settled on the present one (outages.settle_work): ``travel`` seconds later it is over, and
        a message waiting out a delay of its own (a completer's claim watched for a minute) is not the sweep's to
        settle in LATE_SWEEP_SETTLE. What did not settle in time.

        The wait for the work under way is longer by as much as the world moved the intake's clock on for the retried
        intake messages it delivered early (``intake_travel``): the lifecycle an intake took in then is dated that far
        ahead, and a function whose clock was not moved sends its step again delayed by as much (seed 307's scenario
        4: a forged terminate taken in 116 s ahead, its first step delayed 116 s in a's DrainQueue, past the 90 s wait;
        the late sweeps never ran). The product's own delays are waited for as before."""
        runner = self.world.runners["a"]
        sqs = self.box.client("sqs")
        runners, stacks = self.world.runners, self.scenario.stacks
        under_way = WORK_UNDER_WAY_SETTLE + self.intake_travel
        if waiting := settle_work(sqs, runners, stacks, under_way, LATE_SWEEP_LOOK):
            return [
                f"the work under way before the late sweep (+{travel:.0f} s) not settled in {under_way:.0f}s",
                *waiting,
            ]
        self.box.runner_faults.arm([Fault("sweep-grace", "time-travel", "*", value=travel)], seed=0)
        before = len(runner.journal.invocations("SweeperFunction"))
        fired = runner.fire_schedule("SweeperFunction")
        try:
            self._wait(functools.partial(swept, runner, fired, before), 60, "the late sweep")
            if waiting := settle_work(sqs, runners, ("a",), LATE_SWEEP_SETTLE, LATE_SWEEP_LOOK):
                return [
                    f"the late sweep's work (+{travel:.0f} s) not handled in {LATE_SWEEP_SETTLE:.0f}s",
                    *waiting,
                ]
            return []
        finally:
            self.box.runner_faults.disarm()

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


def _ready(node: dict[str, Any]) -> str:
    """The status of the node's Ready condition ("True", "False", "Unknown"; "Unknown" when it has none)."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return str(condition.get("status"))
    return "Unknown"


def _ready_message(node: dict[str, Any]) -> str:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return str(condition.get("message", ""))[:60]
    return ""


def _hooks() -> tuple[HookSpec, ...]:
    return (
        HookSpec("nodecycle-launch", LAUNCHING, HEARTBEAT_TIMEOUT, "ABANDON"),
        HookSpec("nodecycle-terminate", TERMINATING, HEARTBEAT_TIMEOUT, "CONTINUE"),
    )


def _in_service(group: AutoScalingGroup, size: int) -> bool:
    return len(group.in_state("InService")) >= size


def cordons_left(nodes: list[dict[str, Any]], instances: list[InstanceHistory]) -> list[str]:
    """The nodes of ``instances`` still running (not terminated) that are cordoned: at quiescence, a cordon nodecycle
    leaked (its cleanup removed its annotations and left the cordon, or a drain cordoned a node it never claimed).
    No story of the campaign cordons a node, and the sandbox's controllers never do: an API caller's cordon of a
    live node is nodecycle's, and nothing else will lift it (the node takes no new pods for good)."""
    live = {i.node_name for i in instances if i.terminated_at is None}
    return [
        f"node {node['metadata']['name']} of a live instance left cordoned"
        for node in nodes
        if node["metadata"]["name"] in live and (node.get("spec") or {}).get("unschedulable")
    ]


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
