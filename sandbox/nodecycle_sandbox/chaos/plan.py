"""Scenarios and fault plans, drawn from a seed: the same (seed, index) always gives the same scenario.

A scenario is one short story on a fresh group (or two, of two owners): launches, a scale-in, an instance
refresh, a few instances terminated, with pods under PodDisruptionBudgets, a node that may lose its kubelet,
sweeps at random moments, and a handful of faults from the menu below. The cluster is as slow to forget a
node as a real one: a terminated instance's node lingers a few seconds (its kubelet dead at once), and the
pods of a deleted node a few seconds more (podgc's quarantine), both drawn per scenario.

Opted in (``lag``), AWS is as eventually consistent as the real one: the lifecycle table's index behind its
writes, EC2's reads behind its writes, or both, drawn from a stream of their own (:func:`draw_lag`), so that
every seed still draws, with or without them, the stories and fault plans it always drew.

Opted in (``forge``), messages that anyone allowed to send to an intake queue can send are sent among the
real ones (:func:`draw_forgeries`, a stream of its own too): a hook notification for an instance in service
with a token no hook issued, a replay of an action already completed or still open, one sent to the queue of
the stack that does not own the group. Design invariant 8: none of them may disrupt anything.

With faults, outages are drawn last of all, each from a stream of its own (:func:`draw_mapping_paused`,
:func:`draw_iam_detached`, :func:`draw_third_writer`, :func:`draw_work_replay`, :func:`draw_budget_contended`,
:func:`draw_budget_recreated`; set by ``chaos/outages.py``): an event source mapping disabled for a while, one
function's role without its policy, a third writer of the budget ConfigMap, work messages replayed hours after the
story, the scenario's PodDisruptionBudget contended (its evictions answered the budget's 409 Conflict), and the budget
ConfigMap reset (deleted and created again empty).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from nodecycle_sandbox.faults import Fault

KINDS = ("launch", "scale-in", "refresh", "terminate", "two-owners")
_KIND_WEIGHTS = (2, 3, 3, 2, 3)
STACKS = ("a", "b")  # a: Elastic IPs allocated per instance; b: claimed from a pool
FUNCTIONS = ("IntakeFunction", "DrainFunction", "EipFunction", "SweeperFunction", "WakeFunction")


# What a forged message is (see Forgery): a notification no hook sent, for an instance in service (terminate or
# launch); a replay of one a hook sent (an action completed; for a terminate, still open if none is completed:
# a duplicate while its drain runs); a forged terminate sent to the queue of the stack that does not own the group;
# an instance of the group named with the live terminate token of another instance (crossed), or of an instance
# of the other stack's group (other-group). Auto Scaling does not document that it checks a token against the
# instance and group named with it: while forgeries are sent, the emulation takes a call's token alone.
FORGERIES = (
    "forged-terminate",
    "forged-launch",
    "replayed-launch",
    "replayed-terminate",
    "wrong-owner",
    "crossed",
    "other-group",
)
FORGED_LATEST = 12.0  # seconds into the scenario: while its story still runs, mostly


@dataclass(frozen=True)
class Forgery:
    """A well-formed hook notification sent to an intake queue at ``at`` seconds into the scenario; ``pick``
    chooses its instance among those that fit (modulo their number, at that moment)."""

    at: float
    kind: str
    pick: int

    def describe(self) -> str:
        return f"{self.kind} at {self.at:.1f}s"


@dataclass(frozen=True)
class Scenario:
    seed: int
    index: int
    kind: str
    stacks: tuple[str, ...]  # one group per stack
    size: int  # instances per group at the start (a launch scenario starts at 1 and grows to it)
    keep: int  # instances per group at the end of a scale-in
    terminate: int  # instances terminated (replaced) in a "terminate" scenario
    min_healthy: int  # an instance refresh's MinHealthyPercentage
    replicas: int  # pods of the scenario's Deployment, per group
    shutdown: float  # seconds its pods take to stop
    lost_kubelet_at: float | None  # seconds into the scenario a node's kubelet dies (None: never)
    sweeps: tuple[float, ...]  # seconds into the scenario the sweepers run
    faults: tuple[Fault, ...] = field(default=())
    # Compressed from EKS (seconds to a minute; podgc's 40 s): drawn after the faults, so that a seed's
    # stories and fault plans stay what they were before these were drawn.
    node_removal: float = 0.0  # seconds between an instance's end and its node's deletion
    pod_gc_quarantine: float = 0.0  # seconds the pods of a deleted node linger before podgc deletes them
    # Seconds the functions' EC2 reads lag its writes (0: they see the latest state, as moto does); the index
    # lag is a fault of the plan (dynamodb-index-lag). Both drawn only when the campaign is asked for lag.
    ec2_lag: float = 0.0
    # Messages forged or replayed onto the intake queues (drawn only when the campaign is asked to forge).
    forgeries: tuple[Forgery, ...] = ()
    # The harsher cluster's clocks, compressed as the rest (each from a stream of its own, after everything else):
    # how long a hung runtime goes before its kubelet posts the node NotReady (PLEG; 0: no runtime hangs, the
    # cluster's 3 min), and how long after a kubelet is lost an operator taints its node out-of-service (None:
    # nobody does).
    pleg_threshold: float = 0.0
    out_of_service_after: float | None = None

    @property
    def name(self) -> str:
        return f"s{self.seed}-{self.index}"

    @property
    def lagging(self) -> bool:
        """Whether AWS lags in this scenario (drawn with ``lag``: draw_lag never draws no lag at all)."""
        return bool(self.ec2_lag) or any(f.kind == "dynamodb-index-lag" for f in self.faults)

    def without(self, fault_id: str) -> Scenario:
        return replace(self, faults=tuple(f for f in self.faults if f.id != fault_id))

    def with_faults(self, faults: tuple[Fault, ...]) -> Scenario:
        return replace(self, faults=faults)

    def without_ec2_lag(self) -> Scenario:
        return replace(self, ec2_lag=0.0)

    def describe(self) -> str:
        what = {
            "launch": f"launch {self.size} per group",
            "scale-in": f"scale in {self.size} -> {self.keep}",
            "refresh": f"instance refresh of {self.size}, min healthy {self.min_healthy}%",
            "terminate": f"terminate {self.terminate} of {self.size}",
            "two-owners": f"two owners, each an instance refresh of {self.size}",
        }[self.kind]
        lost = "" if self.lost_kubelet_at is None else f", a kubelet lost at {self.lost_kubelet_at:.1f}s"
        sweeps = ", ".join(f"{t:.1f}" for t in self.sweeps)
        if self.pleg_threshold:
            lost += f", a hung runtime's node NotReady after {self.pleg_threshold:.1f}s"
        if self.out_of_service_after is not None:
            lost += f", the lost kubelet's node tainted out-of-service {self.out_of_service_after:.1f}s after"
        lag = f"; EC2's reads {self.ec2_lag:.1f}s behind its writes" if self.ec2_lag else ""
        if self.forgeries:
            lag += "; messages forged: " + ", ".join(f.describe() for f in self.forgeries)
        return (
            f"{self.name} [{self.kind}] stacks {'+'.join(self.stacks)}: {what}; "
            f"{self.replicas} pods per group stopping in {self.shutdown:.1f}s{lost}; sweeps at {sweeps}s; "
            f"nodes removed {self.node_removal:.1f}s after their instance, their pods {self.pod_gc_quarantine:.1f}s "
            f"after them{lag}"
        )


def draw(
    seed: int,
    index: int,
    *,
    kinds: tuple[str, ...] = KINDS,
    faults: bool = True,
    lag: bool = False,
    forge: bool = False,
) -> Scenario:
    """Scenario ``index`` of the campaign of ``seed``; with ``lag``, the same scenario on an eventually
    consistent AWS (its lags drawn by :func:`draw_lag`, after everything else and apart from it); with
    ``forge``, with forged and replayed messages among the real ones (:func:`draw_forgeries`, apart too)."""
    rng = random.Random(f"{seed}:{index}")
    weights = [w for k, w in zip(KINDS, _KIND_WEIGHTS, strict=True) if k in kinds]
    kind = rng.choices([k for k in KINDS if k in kinds], weights)[0]
    stacks = STACKS if kind == "two-owners" else (rng.choice(STACKS),)
    size = rng.randint(3, 5) if kind == "two-owners" else rng.randint(3, 6)
    scenario = Scenario(
        seed=seed,
        index=index,
        kind=kind,
        stacks=stacks,
        size=size,
        keep=rng.randint(0, size - 2),
        terminate=rng.randint(1, size),
        min_healthy=rng.choice((0, 0, 50)),
        replicas=rng.randint(size, 2 * size),
        shutdown=round(rng.uniform(0.2, 1.5), 1),
        lost_kubelet_at=round(rng.uniform(0.0, 3.0), 1) if kind != "launch" and rng.random() < 0.15 else None,
        sweeps=tuple(sorted(round(rng.uniform(0.5, 15.0), 1) for _ in range(rng.randint(3, 8)))),
    )
    scenario = scenario.with_faults(draw_faults(rng, scenario) if faults else ())
    scenario = replace(
        scenario,
        node_removal=round(rng.uniform(0.5, 5.0), 1),
        pod_gc_quarantine=round(rng.uniform(0.5, 4.0), 1),
    )
    # Refusals last, for the same reason: the stories and fault plans drawn before them stay what they were.
    if faults:
        first = len(scenario.faults) + 1
        refusals = tuple(replace(f, id=f"f{n}") for n, f in enumerate(draw_refusals(rng), start=first))
        scenario = scenario.with_faults((*scenario.faults, *refusals))
        # The hazards too, each from a stream of its own: every fault drawn above stays what it was.
        hazards = (
            *draw_hung_runtime(random.Random(f"{seed}:{index}:hung-runtime"), scenario),
            *draw_eip_locked(random.Random(f"{seed}:{index}:eip-locked"), scenario),
        )
        first = len(scenario.faults) + 1
        numbered = tuple(replace(f, id=f"f{n}") for n, f in enumerate(hazards, start=first))
        scenario = scenario.with_faults((*scenario.faults, *numbered))
        # The harsher cluster's clocks, from streams of their own too (they add no fault: every id stays)
        scenario = replace(
            scenario,
            pleg_threshold=draw_pleg_threshold(random.Random(f"{seed}:{index}:pleg"), scenario),
            out_of_service_after=draw_out_of_service(
                random.Random(f"{seed}:{index}:out-of-service"), scenario
            ),
        )
    if forge:
        scenario = replace(scenario, forgeries=draw_forgeries(random.Random(f"{seed}:{index}:forge")))
    if lag:
        index_lag, ec2_lag = draw_lag(random.Random(f"{seed}:{index}:lag"))
        numbered = tuple(replace(f, id=f"f{len(scenario.faults) + 1}") for f in index_lag)
        scenario = replace(scenario, faults=(*scenario.faults, *numbered), ec2_lag=ec2_lag)
    if not faults:
        return scenario
    # The outages last of all, each from a stream of its own: every fault above keeps its draw and its id.
    outages = (
        *draw_mapping_paused(random.Random(f"{seed}:{index}:mapping-paused")),
        *draw_iam_detached(random.Random(f"{seed}:{index}:iam-detached")),
        *draw_third_writer(random.Random(f"{seed}:{index}:third-writer")),
        *draw_work_replay(random.Random(f"{seed}:{index}:work-replay")),
        *draw_budget_contended(random.Random(f"{seed}:{index}:budget-contended")),
        *draw_budget_recreated(random.Random(f"{seed}:{index}:budget-recreated")),
    )
    first = len(scenario.faults) + 1
    numbered = tuple(replace(f, id=f"f{n}") for n, f in enumerate(outages, start=first))
    return scenario.with_faults((*scenario.faults, *numbered))


def draw_faults(rng: random.Random, scenario: Scenario) -> tuple[Fault, ...]:
    """2 to 6 rules from the menu, with moderate rates: enough to interleave things differently every
    time, not so much that every step fails (a real cluster under stress, not a dead one). Clock jumps stay
    within the stacks' heartbeat margin (10 s): a container clock off by more than the margin it is given
    would expire actions by design, which proves nothing."""
    menu = [
        lambda: Fault("", "kube-conflict", "PUT configmaps", _p(rng, 0.3, 0.8), stop=_stop(rng)),
        lambda: Fault("", "kube-conflict", "PATCH nodes", _p(rng, 0.2, 0.6), stop=_stop(rng)),
        lambda: Fault(
            "",
            "kube-throttle",
            rng.choice(("*", "POST pods/eviction", "GET pods")),
            _p(rng, 0.05, 0.2),
            value=1,
        ),
        lambda: Fault("", "kube-error", "*", _p(rng, 0.02, 0.1)),
        lambda: Fault("", "kube-slow", "*", _p(rng, 0.05, 0.2), value=round(rng.uniform(0.2, 1.5), 1)),
        lambda: Fault("", "kube-drop", "*", _p(rng, 0.01, 0.05), limit=3),
        lambda: Fault("", "kube-lost-response", "*", _p(rng, 0.01, 0.05), limit=3),
        lambda: Fault(
            "",
            "aws-throttle",
            rng.choice(("autoscaling.*", "dynamodb.*", "sqs.SendMessage", "ec2.*", "*")),
            _p(rng, 0.05, 0.3),
        ),
        # (a record's writes: PutItem, or TransactWriteItems, a hook's new lifecycle with its action's claim)
        lambda: Fault(
            "",
            "aws-error",
            rng.choice(("autoscaling.CompleteLifecycleAction", "dynamodb.[PT]*", "ec2.*", "*")),
            _p(rng, 0.02, 0.1),
        ),
        # value 1: the duplicate runs at the same time as the first delivery, not after it
        lambda: Fault("", "sqs-duplicate", "*", _p(rng, 0.05, 0.3), value=rng.choice((0, 1))),
        lambda: Fault("", "sqs-delay", "*", _p(rng, 0.05, 0.2), value=rng.randint(1, 4)),
        lambda: Fault("", "sqs-reorder", "*", _p(rng, 0.1, 0.3)),
        lambda: Fault("", "sqs-drop", "*", _p(rng, 0.02, 0.1), limit=2),
        # (EventBridge's events, to intake: at least once, and a retried delivery overtaken by the next ones)
        lambda: Fault("", "event-duplicate", "IntakeFunction", _p(rng, 0.05, 0.3), value=rng.choice((0, 1))),
        lambda: Fault("", "event-delay", "IntakeFunction", _p(rng, 0.05, 0.2), value=rng.randint(1, 6)),
        lambda: Fault(
            "",
            "worker-kill",
            rng.choice(FUNCTIONS),
            _p(rng, 0.05, 0.3),
            limit=rng.randint(1, 3),
            value=rng.randint(1, 8),
        ),
        lambda: Fault(
            "",
            "clock-skew",
            rng.choice(FUNCTIONS),
            _p(rng, 0.1, 0.5),
            value=rng.choice((-1, 1)) * rng.randint(1, 8),
        ),
    ]
    chosen = rng.sample(menu, rng.randint(2, 6))
    return tuple(replace(make(), id=f"f{n}") for n, make in enumerate(chosen, start=1))


# How long a refusal lasts at most: in the cluster, twice the stacks' drain timeout (20 s), so that drains meet
# their timeout policy under refusals; in AWS, less than the hooks' heartbeat timeout (30 s) less the heartbeat
# margin (10 s). An account that refuses longer the calls that keep an action alive (its heartbeat; the records
# the engine and the sweeper find it by) lets Auto Scaling end it by its default result whatever nodecycle does:
# an outage to alarm on, not an interleaving whose outcome the invariants can judge.
KUBE_REFUSAL_LONGEST = 45.0
AWS_REFUSAL_LONGEST = 18.0


def draw_refusals(rng: random.Random) -> tuple[Fault, ...]:
    """None, one or two refusals: a request judged and refused, for a while, as a real cluster and account
    refuse them. A validating webhook with ``failurePolicy: Fail`` that is down or a policy engine that
    denies (writes only: evictions, pod deletions, node patches), an RBAC binding or access entry edited and
    restored, an SCP or permissions boundary that denies one AWS call. Each lasts a window of a few seconds
    up to its kind's longest (above), and stops: a refusal that never ends is a misconfiguration, whose right
    outcome (the policy, an alarm) the invariants do not tell from a failure. Half of them are there from the
    moment the story begins: a scenario's first drains start within a second or two."""
    webhook = ("POST pods/eviction", "DELETE pods", "PATCH nodes", "*")
    menu = [
        lambda: Fault("", "kube-webhook-down", rng.choice(webhook), _p(rng, 0.5, 1.0)),
        lambda: Fault("", "kube-webhook-deny", rng.choice(webhook[:3]), _p(rng, 0.5, 1.0)),
        lambda: Fault(
            "",
            "kube-forbidden",
            rng.choice(("PATCH nodes", "POST pods/eviction", "* configmaps", "* pods", "*")),
            _p(rng, 0.5, 1.0),
        ),
        lambda: Fault(
            "",
            "aws-denied",
            rng.choice(
                (
                    "autoscaling.CompleteLifecycleAction",
                    "autoscaling.RecordLifecycleActionHeartbeat",
                    "autoscaling.Describe*",
                    "ec2.*",
                    "dynamodb.*",
                    "sqs.SendMessage",
                )
            ),
            _p(rng, 0.5, 1.0),
        ),
    ]
    chosen = rng.sample(menu, rng.choice((0, 1, 1, 2)))
    faults = []
    for make in chosen:
        fault = make()
        start = 0.0 if rng.random() < 0.5 else round(rng.uniform(0.5, 6.0), 1)  # drains start at once
        longest = AWS_REFUSAL_LONGEST if fault.kind == "aws-denied" else KUBE_REFUSAL_LONGEST
        stop = round(start + rng.uniform(2.0, longest), 1)
        faults.append(replace(fault, start=start, stop=stop, limit=rng.randint(3, 30)))
    return tuple(faults)


# The share of the scenarios that drain something in which a node's container runtime hangs, and of those of
# stack a (Elastic IPs allocated per instance, released at terminate) in which AWS locks an address.
HUNG_RUNTIME_SHARE = 0.3
EIP_LOCKED_SHARE = 0.3
HAZARD_LATEST = 2.0  # seconds into the scenario: before its first drains have evicted much, mostly


def draw_hung_runtime(rng: random.Random, scenario: Scenario) -> tuple[Fault, ...]:
    """A node whose container runtime hangs (``KubeServer.hang_runtime``), in a share of the scenarios that
    drain nodes, from ``rng`` (a stream of its own): its kubelet lives (the node Ready, its Lease renewed) and
    stops none of the pods deleted there, evicted or forced, which stay Terminating past their grace. Nothing
    tells a drain they will never go; invariant 10 still gives it its timeout + force grace + a margin, with no
    excuse: the product gives such pods up (drain/evict.py's FORCED_STOP_SLACK). The world hangs, ``start``
    seconds into the story, the runtime of a node whose instance is terminating then, else of a node of the
    scenario (``value`` picks which), until the scenario ends (a real one hangs until someone restarts it)."""
    if scenario.kind == "launch" or rng.random() >= HUNG_RUNTIME_SHARE:
        return ()
    start = round(rng.uniform(0.0, HAZARD_LATEST), 1)
    return (Fault("", "kube-hung-runtime", "nodes", 1.0, start=start, limit=1, value=rng.randrange(1000)),)


def draw_eip_locked(rng: random.Random, scenario: Scenario) -> tuple[Fault, ...]:
    """An Elastic IP that AWS locks (``InvalidAddress.Locked`` to ReleaseAddress until AWS Support unlocks it),
    in a share of the scenarios of stack a that terminate instances, from ``rng`` (a stream of its own): the
    address of an instance whose terminate action has begun, from ``start`` seconds into the story on (``value``
    picks which), before nodecycle releases it. The product leaves it to the sweeper; the world lifts the lock
    once the scenario is quiescent, and the judge of "nothing leaks" demands it released by the sweeps after."""
    if scenario.kind == "launch" or "a" not in scenario.stacks or rng.random() >= EIP_LOCKED_SHARE:
        return ()
    start = round(rng.uniform(0.0, HAZARD_LATEST), 1)
    return (
        Fault("", "eip-locked", "ec2.ReleaseAddress", 1.0, start=start, limit=1, value=rng.randrange(1000)),
    )


# How long a hung runtime goes before its kubelet posts its node Ready=False, "PLEG is not healthy" (the kubelet's
# relistThreshold: 3 min), compressed: from at once to the drain timeout (20 s), so that a drain meets a node that
# turns NotReady before it begins, while it evicts, or while it forces. The taint manager's eviction of the pods of
# a not-ready node follows the world's toleration (world.UNREACHABLE_TOLERATION).
PLEG_SHORTEST = 1.0
PLEG_LONGEST = 20.0
# The share of the scenarios whose lost kubelet's node an operator taints node.kubernetes.io/out-of-service (the
# non-graceful node shutdown: a node seen NotReady and judged gone for good), and how long after the loss at most
# (the node is Unknown after the world's monitor grace, 2 s; the operator acts once it is, never before).
OUT_OF_SERVICE_SHARE = 0.5
OUT_OF_SERVICE_LATEST = 15.0


def draw_pleg_threshold(rng: random.Random, scenario: Scenario) -> float:
    """The compressed PLEG threshold of a scenario whose runtime hangs (0.0 in one where none does), from ``rng``
    (a stream of its own: a seed's stories, faults and ids are what they were)."""
    if not any(f.kind == "kube-hung-runtime" for f in scenario.faults):
        return 0.0
    return round(rng.uniform(PLEG_SHORTEST, PLEG_LONGEST), 1)


def draw_out_of_service(rng: random.Random, scenario: Scenario) -> float | None:
    """In a share of the scenarios that lose a kubelet, how long after the loss an operator taints its node
    ``node.kubernetes.io/out-of-service=nodeshutdown:NoExecute`` (Kubernetes' non-graceful node shutdown): the
    taint manager evicts its pods at once, and podgc force-deletes those left Terminating there (kubelet gone), so
    that their controllers replace them elsewhere. From ``rng``, a stream of its own."""
    if scenario.lost_kubelet_at is None or rng.random() >= OUT_OF_SERVICE_SHARE:
        return None
    return round(rng.uniform(0.0, OUT_OF_SERVICE_LATEST), 1)


# The outages real accounts and clusters have that the menu above does not draw, each in a share of the scenarios
# (their world.py moments: chaos/outages.py). The stacks' work queues and the functions that read them (the intake
# queue's function starts actions, the others carry them on), and the functions whose role a policy edit can hit.
OUTAGE_SHARE = 0.3
WORK_FUNCTIONS = ("IntakeFunction", "DrainFunction", "EipFunction", "WakeFunction")
ROLE_FUNCTIONS = ("IntakeFunction", "DrainFunction", "EipFunction", "SweeperFunction")
REPLAYED_FUNCTIONS = ("DrainFunction", "EipFunction", "WakeFunction")
OUTAGE_LATEST = 6.0  # seconds into the scenario an outage begins at the latest: while its story runs
# How long a mapping stays disabled, a policy detached, at most: "minutes" on AWS, compressed as the hooks are (a
# 30 s heartbeat timeout for AWS's default of 3,600 s; the global timeout 180 s): under the global timeout less a
# drain's own time, so that nodecycle can still finish once it is over, and past the heartbeat timeout (a mapping)
# so that only the sweeper's heartbeats, not the stalled step's, keep an action alive meanwhile. A detached policy
# stops at the heartbeat timeout: the sweeper's role, detached longer, leaves nobody to keep a stalled action alive.
MAPPING_PAUSED_LONGEST = 60.0
IAM_DETACHED_LONGEST = 30.0
# A third writer of the budget ConfigMap (a GitOps controller reconciling its labels, a backup tool annotating it)
# writes every few hundred milliseconds at most while it storms, for as long as the cluster's refusals last.
THIRD_WRITER_LONGEST = KUBE_REFUSAL_LONGEST
# How much later than the story a work message is replayed (an operator's redrive of a dead-letter queue, a copy
# sent again by hand): hours, within the queues' retention (4 days: the template's).
REPLAY_EARLIEST = 3600.0
REPLAY_LATEST = 12 * 3600.0


def draw_mapping_paused(rng: random.Random) -> tuple[Fault, ...]:
    """A stack's event source mapping disabled (``aws lambda update-event-source-mapping --no-enabled``: an
    operator's pause, or Lambda's own on a role it cannot use) from ``start`` for up to a minute, then enabled
    again: its queue stalls meanwhile, and what it held comes at once afterwards. ``target``: the mapping's
    function; ``value`` picks the stack."""
    if rng.random() >= OUTAGE_SHARE:
        return ()
    function = rng.choice(WORK_FUNCTIONS)
    start = round(rng.uniform(0.0, OUTAGE_LATEST), 1)
    stop = round(start + rng.uniform(5.0, MAPPING_PAUSED_LONGEST), 1)
    return (
        Fault(
            "", "mapping-paused", function, 1.0, start=start, stop=stop, limit=1, value=rng.randrange(1000)
        ),
    )


def draw_iam_detached(rng: random.Random) -> tuple[Fault, ...]:
    """One function's role loses its policy (detached by a mistaken change, put back by the next deploy) from
    ``start`` for up to the hooks' heartbeat timeout: every AWS call of that function is refused with IAM's own
    AccessDenied (its event source mapping's polls too, which use the role), the other functions' are not.
    ``target``: the function; ``value`` picks the stack."""
    if rng.random() >= OUTAGE_SHARE:
        return ()
    function = rng.choice(ROLE_FUNCTIONS)
    start = round(rng.uniform(0.0, OUTAGE_LATEST), 1)
    stop = round(start + rng.uniform(2.0, IAM_DETACHED_LONGEST), 1)
    return (
        Fault("", "iam-detached", function, 1.0, start=start, stop=stop, limit=1, value=rng.randrange(1000)),
    )


def draw_third_writer(rng: random.Random) -> tuple[Fault, ...]:
    """A third writer of the budget ConfigMap, storming from ``start`` to ``stop``: a write of its own metadata
    every ``value`` seconds, so that every conditional write nodecycle makes in between meets a real 409 (a new
    resourceVersion, the document unchanged), not an injected one."""
    if rng.random() >= OUTAGE_SHARE:
        return ()
    start = round(rng.uniform(0.0, OUTAGE_LATEST), 1)
    stop = round(start + rng.uniform(2.0, THIRD_WRITER_LONGEST), 1)
    every = round(rng.uniform(0.05, 0.4), 2)
    return (Fault("", "budget-third-writer", "configmaps", 1.0, start=start, stop=stop, value=every),)


def draw_work_replay(rng: random.Random) -> tuple[Fault, ...]:
    """Once the story is over, ``limit`` of its oldest work messages to ``target`` sent again ``value`` seconds
    later (hours: a dead-letter queue redriven, a message copied back by hand), the functions' clocks moved on
    with them. Design invariant 8: nothing a replay names may be disrupted again."""
    if rng.random() >= OUTAGE_SHARE:
        return ()
    function = rng.choice(REPLAYED_FUNCTIONS)
    later = round(rng.uniform(REPLAY_EARLIEST, REPLAY_LATEST))
    return (Fault("", "work-replay", function, 1.0, limit=rng.randint(1, 3), value=later),)


# How long the scenario's PodDisruptionBudget stays contended at most: as long as the cluster's refusals, so that
# drains meet their timeout policy under it (each eviction it answers holds its caller about 10 s: the eviction
# handler's 20 tries of its status write, 500 ms apart, before its answer)
BUDGET_CONTENDED_LONGEST = KUBE_REFUSAL_LONGEST


def draw_budget_contended(rng: random.Random) -> tuple[Fault, ...]:
    """The scenario's PodDisruptionBudget contended from ``start`` to ``stop`` (``KubeServer.contend_budget``): its
    status written by others (many evictions at once under it: a refresh of many nodes, several stacks, another
    tool's drains) at every try of the eviction handler's status write, each eviction it would allow answered,
    about 10 s late, the last conflict of its status write, a 409 on the poddisruptionbudgets.policy object
    (kube-apiserver, pkg/registry/core/pod/storage/eviction.go: EvictionsRetry; retry.RetryOnConflict returns that
    conflict, never the ErrWaitTimeout the handler would answer 504 Timeout "... due to conflicts");
    one it has no room for is still answered 429 at once. Nothing else is held up: the other pods of a drain are."""
    if rng.random() >= OUTAGE_SHARE:
        return ()
    start = round(rng.uniform(0.0, OUTAGE_LATEST), 1)
    stop = round(start + rng.uniform(2.0, BUDGET_CONTENDED_LONGEST), 1)
    return (Fault("", "kube-budget-contended", "poddisruptionbudgets", 1.0, start=start, stop=stop, limit=1),)


# How long after its delete the budget ConfigMap is created again at most (one command's two requests; the outage's
# stop, the moment the world looks that it was).
BUDGET_RECREATED_LONGEST = 1.0


def draw_budget_recreated(rng: random.Random) -> tuple[Fault, ...]:
    """The budget ConfigMap deleted and created again empty at ``start`` (``kubectl replace --force -f
    deploy/rbac.yaml``, an operator "resetting" a budget that looks stuck; a GitOps controller that prunes and
    re-applies it): every holder and waiter is forgotten at once, not expired. The first write after it seeds the
    drains in progress the nodes show (domain/budget/seed.py); a node granted a slot but not yet cordoned loses it,
    the line is lost, and a seeded drain that no longer fits pauses: drains lose their slots in the middle of the
    story, so that invariant 9 (a drain in progress goes first, its wait not counted as drain time) is judged on
    them. ``stop``: a moment after (the delete and the create are one command's, milliseconds apart)."""
    if rng.random() >= OUTAGE_SHARE:
        return ()
    start = round(rng.uniform(1.0, OUTAGE_LATEST), 1)  # (the first drains hold slots, wait in line, evict)
    stop = round(start + rng.uniform(0.2, BUDGET_RECREATED_LONGEST), 1)
    return (Fault("", "budget-recreated", "configmaps", 1.0, start=start, stop=stop, limit=1),)


# How far behind its writes AWS reads at most, in seconds: "usually under a second" (a DynamoDB global secondary
# index; EC2's eventual consistency), "seconds under load", kept under the resume grace (5 s) and the stacks'
# poll and retry intervals' few seconds so that a lag is a late read the product must live with, not an outage.
INDEX_LAG_LONGEST = 4.0
EC2_LAG_LONGEST = 3.0


def draw_lag(rng: random.Random) -> tuple[tuple[Fault, ...], float]:
    """The lags of one scenario on an eventually consistent AWS, from ``rng`` (a stream of their own: a seed's
    other draws are the same with and without them): the lifecycle table's index behind a share of its writes
    (a ``dynamodb-index-lag`` rule, every caller's writes), the functions' EC2 reads behind its writes (seconds;
    0: none), or both. Never neither: a scenario asked for lag has some."""
    which = rng.choice(("index", "ec2", "both"))
    index_lag: tuple[Fault, ...] = ()
    if which in ("index", "both"):
        index_lag = (
            Fault(
                "",
                "dynamodb-index-lag",
                "*",
                _p(rng, 0.3, 1.0),
                value=round(rng.uniform(0.3, INDEX_LAG_LONGEST), 1),
            ),
        )
    ec2_lag = round(rng.uniform(0.3, EC2_LAG_LONGEST), 1) if which in ("ec2", "both") else 0.0
    return index_lag, ec2_lag


def draw_forgeries(rng: random.Random) -> tuple[Forgery, ...]:
    """One to three forged or replayed messages, at moments of the story, from ``rng`` (a stream of their own)."""
    drawn = (
        Forgery(round(rng.uniform(0.2, FORGED_LATEST), 1), rng.choice(FORGERIES), rng.randrange(1000))
        for _ in range(rng.randint(1, 3))
    )
    return tuple(sorted(drawn, key=lambda f: f.at))


def _p(rng: random.Random, low: float, high: float) -> float:
    return round(rng.uniform(low, high), 2)


def _stop(rng: random.Random) -> float | None:
    """A storm that ends (most do), or one that lasts the whole scenario."""
    return None if rng.random() < 0.3 else round(rng.uniform(3.0, 15.0), 1)
