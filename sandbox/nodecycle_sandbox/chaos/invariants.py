"""The invariants of ``docs/design.md``, judged on what the world recorded during one scenario: the API
server's history, the Auto Scaling emulation's actions and instances, EC2's addresses. Never on nodecycle's
logs; the one thing read from nodecycle's own state is the lifecycle record's ``outcome``, which may say why
an action was completed with pods still on its node.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nodecycle_sandbox.aws.records import LAUNCHING, TERMINATING, ActionRecord
from nodecycle_sandbox.chaos.world import (
    BUDGET,
    BUDGET_RETRY,
    DRAIN_TIMEOUT,
    FORCE_GRACE,
    IN_PROGRESS_ANNOTATION,
    INSTANCE_TAG,
    LIMITS,
    OWNER_ANNOTATION,
    OWNER_TAG,
    POOL_TAG,
    RESUME_GRACE,
    SWEEP_INTERVAL,
    Observation,
)
from nodecycle_sandbox.checks import (
    budgets_of,
    cordon_peaks,
    counted_healthy,
    healthy_pods_on_at,
    last_pod_gone,
    pdb_breaches,
    released_at,
    selects,
)
from nodecycle_sandbox.kube import HistoryEntry
from nodecycle_sandbox.kube.history import API
from nodecycle_sandbox.kube.meta import condition, node_ready

# The invariants, by name, as a campaign reports them.
INVARIANTS = {
    "budget": "the budget is never exceeded, globally or in any zone (1)",
    "confirmed": "nothing is cordoned or evicted for a node whose instance's terminate action has not begun, or has ended (6, 8)",
    "drain": "no terminate action is completed while its node still has evictable pods, unless the outcome says why, and in time for what it says (2)",
    "global-timeout": "every accepted action is completed by nodecycle before its global timeout (2, 11)",
    "ownership": "no owner touches another's node or budget entry, by what it writes or by who writes it, nor frees a node under its drain (3, 12)",
    "addresses": "no address leaked (one AWS locked: once unlocked), stolen, released while in use, or two on one instance (4)",
    "repair": "everything settles: nothing left half done at quiescence, after the sweepers ran (5)",
    "pdb": "no eviction takes a PodDisruptionBudget below its floor",
    "precedence": "a drain in progress keeps precedence over nodes not yet touched, a waiter near its global deadline goes first (whichever stack's), and a wait for a slot never counts against a drain's timeout (9)",
    "slot-held": "no drain holds its slot past its timeout + force grace + a margin (+ faults on its own messages, deletes and completer), even on a dead node (10)",
}
# Outcomes that claim the node was emptied: with pods still on it, they are wrong.
CLAIMS_DRAINED = frozenset({None, "completed", "drained", "drain-timeout-forced"})
# Outcomes that say the drain's time ran out (its timeout policy applied: drain-timeout-continued, -unlisted,
# -forced-incomplete, -reads-refused, -cordon-refused), and the engine's guard's near the global timeout: with
# pods still on the node, right only once that time could have run out.
TIMED_OUT = "drain-timeout-"
GUARD_OUTCOME = "global-timeout-near"
SLOT_MARGIN = 20.0  # seconds past drain timeout + force grace: two crashed-step redeliveries and a retry
# How long a slot may stand granted before its cordon's first try without that counting against the margin. The
# product dates a drain from its cordon, not from the grant (the pods are promised the whole timeout after the
# cordon, which ``_forced_from`` holds it to; time waiting for a slot is not the drain's, invariant 9), so a judge
# timing the drain from the grant must allow the steps between: run at once after the grant (the slot's commit,
# the node's read and the slot's confirmation: a second or two under load), or, for a waiter whose slot a release
# passed on and whose wake-up is late or lost (a paused mapping, a delayed event), at its own next ask, at most
# RETRY_IN_LINE_FACTOR (4) times BudgetRetrySeconds later (layers/nodecycle/domain/drain/acquire.py). Longer, the
# slot idled unbounded: it counts as held.
PRE_CORDON_SLACK = 4 * BUDGET_RETRY
# What an injected delivery fault on one of a drain's own messages costs it, on top of the margin: a late
# message its delay; a lost one until the sweeper resumes the lifecycle (a sweep interval, the resume grace,
# and one step). Faults that hit other lifecycles' messages excuse nothing.
LOST_MESSAGE_COST = SWEEP_INTERVAL + RESUME_GRACE + 1.0
# What a reorder costs a message it finds alone in its batch: the runner holds it back a second (its firing then
# names the instances the message is about, as a late one's does; runner/faults.py).
REORDER_HOLD = 1.0
# What a container killed while it completes a drain's action costs it: its completion claim is held until the
# invocation it was in would have ended (the functions' 60 s timeout: a crash and a timeout look alike to the next
# completer, and a claim taken over early completes twice), then the work message comes back within a visibility
# timeout. Any kill of a completing function in the drain's span excuses it: the firing does not say which action's
# invocation it killed.
KILLED_COMPLETER_COST = 60.0 + 5.0
COMPLETERS = frozenset({"DrainFunction", "EipFunction", "SweeperFunction"})
# The DynamoDB writes whose denial leaves a completer's claim standing as a kill does: its claimed record's commit (what
# its call did, or the claim withdrawn), or the state-change record its completion writes before the call, refused
# (AccessDenied: not retried, the message fails). Nothing can take the claim back then; it is held for the same
# KILLED_COMPLETER_COST. The firing names the instances of the records written (aws/faults.py), so only a denial of
# the drain's own records excuses it.
RECORD_WRITES = frozenset(
    {"dynamodb.PutItem", "dynamodb.UpdateItem", "dynamodb.DeleteItem", "dynamodb.TransactWriteItems"}
)
# What an outage of one of those functions in the drain's own stack costs it (chaos/outages.py: its event source
# mapping disabled, its role without its policy): while it lasts no step of the drain can run, nor its completion
# (the node stays cordoned, rightly holding its slot), so the overlap of its window with the drain's span; then a
# message that failed in it comes back after the visibility timeout (5 s), and Lambda's poller starts again (a
# second or two). What holds up other stacks, or functions outside the drain's span (intake), excuses nothing.
STALLING_OUTAGES = frozenset({"mapping-paused", "iam-detached"})
OUTAGE_RECOVERY = 5.0 + 2.0
# What a forced delete of one of a drain's pods that an injected fault answered (refused, failed) costs it: the
# force policy asks such a pod again at every poll until the force grace and its slack are over (the product's
# FORCED_POD_SLACK: a pod still there then is given up on), not only for the margin.
FORCED_DELETE_SLACK = 60.0
# What a fault on the cleanup's requests costs a drain whose slot its cleanup gives back after the completion: a
# read or PATCH of its node that failed is tried again at once for the product's RELEASE_FAILING_FOR (10 s) before
# the release is given up on and the slot given back; a budget ConfigMap write that failed is tried again after
# DRAIN_RETRY_CAP_SECONDS (5 s), rounded up with a redelivery (layers/nodecycle/domain/drain/cleanup.py).
RELEASE_FAILING_COST = 10.0 + 5.0 + 5.0
# The most a drain's deadline is capped before its action's global timeout (the product's tail: the force
# grace, a stuck pod's margin of 60 s, 5 s for its looks (LOOK_SLACK), the load balancer delay, 0 here, and the
# engine's settle margin, 34 s under the campaign's settings), rounded up: a later cap would call a forced delete early that was not.
DRAIN_TAIL_LONGEST = 120.0
# The most a scheduled maintenance's drain deadline is capped before the maintenance starts: no action is completed
# for it, so the product keeps only the force grace, 5 s for its looks and the load balancer delay (0 here) before
# the start (domain/drain/common.py, _maintenance_tail), and a second more: the product reads the start in whole
# seconds (AWS Health's and EC2's times), up to a second before the world's. A hook's DRAIN_TAIL_LONGEST there would
# let a maintenance's force delete pods two minutes before it had to.
MAINTENANCE_TAIL_LONGEST = FORCE_GRACE + 5.0 + 1.0
# Times from two processes' clocks (the API server's history, the Auto Scaling emulation's), one machine's
CLOCK_SLACK = 0.05
# Seconds a node's claim may have been cleared before a budget write that seeds it as a holder: the seed lists the
# nodes (one consistent list) before the write, and a cleanup may clear the claim between the two; the list's and the
# write's read timeouts (adapters/kube/budget.py, 15 s each) bound that
SEED_LIST_SLACK = 30.0
# The API server's faults that leave a request undone (a slow answer or a lost response did it); a 409 storm's
# conflict is one too: a cordon's PATCH it answers is a first try of the drain, whose time runs since
_NOT_DONE = frozenset(
    {
        "kube-throttle",
        "kube-error",
        "kube-drop",
        "kube-webhook-down",
        "kube-webhook-deny",
        "kube-forbidden",
        "kube-conflict",
    }
)


@dataclass(frozen=True)
class Violation:
    invariant: str
    detail: str


def check(observation: Observation) -> list[Violation]:
    found: list[Violation] = []
    for judge in (
        _budget,
        _confirmed,
        _drain,
        _global_timeout,
        _ownership,
        _writers,
        _addresses,
        _repair,
        _pdb,
        _slot_held,
        _precedence,
    ):
        found += list(judge(observation))
    return found


def _budget(o: Observation) -> Iterator[Violation]:
    peak, zones = cordon_peaks(o.history, released_at(o.history, o.actions), evictions=True)
    if peak > LIMITS["total"]:
        yield Violation("budget", f"{peak} nodes drained at once (limit {LIMITS['total']})")
    for zone, count in zones.items():
        if count > LIMITS["per_zone"]:
            yield Violation("budget", f"{count} nodes drained at once in {zone} (limit {LIMITS['per_zone']})")


def _confirmed(o: Observation) -> Iterator[Violation]:
    """Design invariant 8: a node is disrupted by an API caller (cordoned; a pod on it evicted or deleted) only
    once Auto Scaling has begun its instance's terminate action. The campaign's stories disrupt nodes for no
    other reason (no maintenance event, no rebalance recommendation): a disruption before that, or of a node
    whose instance never terminated, came from a message no hook sent for that action (forged, replayed,
    another instance's), or from a bug."""
    instance_of = {node: instance for instance, node in o.nodes_of.items()}
    began: dict[str, float] = {}
    for action in o.actions:
        if action.transition == TERMINATING:
            began[action.instance_id] = min(
                began.get(action.instance_id, action.started_at), action.started_at
            )
    ended = _terminates_ended(o)
    node_of_pod: dict[tuple[str, str], str] = {}
    first: dict[str, tuple[float, str]] = {}  # node -> when and how it was first disrupted
    cordoned: dict[str, bool] = {}  # node -> whether its last write left it cordoned, whoever wrote it
    for entry in o.history:
        if entry.kind == "Pod" and (node := (entry.object.get("spec") or {}).get("nodeName")):
            node_of_pod[(entry.namespace, entry.name)] = node
        was_cordoned = entry.kind == "Node" and cordoned.get(entry.name, False)
        if entry.kind == "Node":
            cordoned[entry.name] = entry.unschedulable and not entry.removed
        if entry.source != API:
            continue
        disrupted: tuple[str, str] | None = None  # (node, how)
        if entry.kind == "Node" and entry.unschedulable and not entry.removed:
            first.setdefault(entry.name, (entry.time, "cordoned"))
            if not was_cordoned:
                disrupted = (entry.name, "cordoned")
        elif entry.kind == "Pod" and (entry.resource == "pods/eviction" or entry.verb == "delete"):
            node = node_of_pod.get((entry.namespace, entry.name))
            if node is not None:
                how = "evicted" if entry.resource == "pods/eviction" else "deleted"
                first.setdefault(node, (entry.time, f"pod {entry.namespace}/{entry.name} {how}"))
                disrupted = (node, f"pod {entry.namespace}/{entry.name} {how}")
        # (invariants 6 and 8: a replayed or late message of an action already completed drains nothing again; the
        # cleanup's writes of a node its drain left cordoned are no new cordon)
        if disrupted is not None and (instance := instance_of.get(disrupted[0])) in ended:
            end = ended[instance]
            if entry.time > end + CLOCK_SLACK:
                node, how = disrupted
                yield Violation(
                    "confirmed",
                    f"{node} ({instance}): {how} at {entry.time - o.acting_at:.1f}s, "
                    f"{entry.time - end:.1f}s after its terminate action ended",
                )
    for node, (at, how) in sorted(first.items()):
        instance = instance_of.get(node)
        if instance is None:
            continue  # not a node of this scenario's groups
        start = began.get(instance)
        if start is None:
            yield Violation(
                "confirmed", f"{node} ({instance}): {how} at {at - o.acting_at:.1f}s, never terminated"
            )
        elif at < start - CLOCK_SLACK:
            yield Violation(
                "confirmed",
                f"{node} ({instance}): {how} at {at - o.acting_at:.1f}s, {start - at:.1f}s before its terminate "
                "action began",
            )


def _terminates_ended(o: Observation) -> dict[str, float]:
    """Instance -> when its last terminate action ended, for the instances none of whose terminate actions is still
    open: nothing may disrupt their nodes after that."""
    ended: dict[str, float] = {}
    open_: set[str] = set()
    for action in o.actions:
        if action.transition != TERMINATING:
            continue
        if action.finished_at is None:
            open_.add(action.instance_id)
        else:
            ended[action.instance_id] = max(ended.get(action.instance_id, 0.0), action.finished_at)
    return {instance: at for instance, at in ended.items() if instance not in open_}


def _drain(o: Observation) -> Iterator[Violation]:
    """A terminate action completed with pods still on its node is wrong unless its outcome says why; and an
    outcome that says its time ran out (the drain's timeout, or the action's global timeout near) excuses only a
    completion that came once that time could have run out: one before is a drain cut short (invariant 2: "not
    completed before its drain finished or its drain timeout policy applied")."""
    nodes = o.nodes_of
    forced_from: dict[str, float] | None = None
    skew = max((abs(f.value or 0.0) for f in o.scenario.faults if f.kind == "clock-skew"), default=0.0)
    for action in o.actions:
        if action.transition != TERMINATING or action.outcome != "completed" or action.finished_at is None:
            continue
        node = nodes.get(action.instance_id)
        if node is None:
            continue
        before = [e for e in o.history if e.time <= action.finished_at]
        if last_pod_gone(before, node) is not None:
            continue
        outcome = o.outcomes.get(action.token)
        left = sorted(e.name for e in _pods_on_at(before, node))
        if outcome in CLAIMS_DRAINED:
            yield Violation(
                "drain",
                f"{action.instance_id} ({node}) completed with outcome {outcome!r} while {len(left)} pods were "
                f"still on it: {', '.join(left[:5])}",
            )
            continue
        if outcome == GUARD_OUTCOME:
            # (the engine's guard acts within its settle margin of the global timeout: never before the drain's
            # deadline is capped, DRAIN_TAIL_LONGEST before it)
            due = action.global_deadline - DRAIN_TAIL_LONGEST - skew
        elif outcome is not None and outcome.startswith(TIMED_OUT):
            if forced_from is None:
                forced_from = _forced_from(o)
            # (a drain that never began timed out waiting for its slot or its reads: nothing to compare)
            due = forced_from.get(node, -float("inf"))
        else:
            continue
        if action.finished_at < due - CLOCK_SLACK:
            yield Violation(
                "drain",
                f"{action.instance_id} ({node}) completed with outcome {outcome!r} "
                f"{due - action.finished_at:.1f}s before that time could run out, while {len(left)} pods were "
                f"still on it: {', '.join(left[:5])}",
            )


def _pods_on_at(history: list[HistoryEntry], node: str) -> list[HistoryEntry]:
    present: dict[str, HistoryEntry] = {}
    for entry in history:
        if entry.kind != "Pod":
            continue
        key = f"{entry.namespace}/{entry.name}"
        meta = entry.object.get("metadata") or {}
        daemon = any(r.get("kind") == "DaemonSet" for r in meta.get("ownerReferences") or [])
        on = (entry.object.get("spec") or {}).get("nodeName") == node and not daemon
        if on and not entry.removed:
            present[key] = entry
        else:
            present.pop(key, None)
    return list(present.values())


def _global_timeout(o: Observation) -> Iterator[Violation]:
    """Every action ends by nodecycle's completion, in time. Excused: an action that lapsed, with no outcome of
    nodecycle's, while its stack's sweeper could not run for its whole heartbeat window (see
    :func:`_unswept_window`)."""
    for action in o.actions:
        kind = "launch" if action.transition == LAUNCHING else "terminate"
        if action.active:
            continue  # reported as left unsettled by "repair"
        if action.outcome == "heartbeat-timeout" and _unswept_window(o, action):
            continue
        if action.outcome != "completed":
            yield Violation(
                "global-timeout",
                f"{kind} of {action.instance_id} ended by {action.outcome}, not by nodecycle",
            )
        elif action.finished_at is not None and action.finished_at > action.global_deadline:
            yield Violation(
                "global-timeout", f"{kind} of {action.instance_id} completed after its global timeout"
            )


def _unswept_window(o: Observation, action: ActionRecord) -> bool:
    """Whether the heartbeat window ``action`` lapsed in (its last, from its last heartbeat or its start to its
    end: its first unless something kept it alive, and then a stall of an earlier window excuses nothing) passed
    with its stack's sweeper stalled (its role without its policy) for all but less than a sweep interval of it,
    while nodecycle's own steps never began on it: a terminate whose drain never touched its node nor asked the
    budget for it, a launch with no outcome of nodecycle's. The stacks' promise (README: a heartbeat timeout of at least a sweep interval plus the margin,
    "while a queue stalls only the sweeper heartbeats") stands on a sweeper that runs in each window: an action
    whose event intake could not take in time (a throttled write hands it to the intake queue 60 s later: past a
    30 s heartbeat timeout), or whose first step's message a refusal kept from its queue, has only the sweeper to
    adopt or resume it, and a sweeper refused every call for the whole window cannot, in AWS as here. An outage
    for the alarms (the sweeper's errors, the expired actions), not an interleaving the invariant can judge. An
    action whose steps did run heartbeats by them, whatever the sweeper does: judged as ever."""
    deadline = action.finished_at if action.finished_at is not None else action.deadline
    window = max(action.started_at, deadline - action.heartbeat_timeout)
    if action.transition == TERMINATING:
        if _drain_begun(o, o.nodes_of.get(action.instance_id), deadline):
            return False
    elif o.outcomes.get(action.token) is not None:
        return False
    stalled = 0.0
    for begin, end in _sweeper_stalled(o).get(o.groups.get(action.group, ""), ()):
        stalled += max(0.0, min(end, deadline) - max(begin, window))
    return action.heartbeat_timeout - stalled < SWEEP_INTERVAL


def _drain_begun(o: Observation, node: str | None, before: float) -> bool:
    """Whether nodecycle began a drain of ``node`` before ``before``: claimed it (its owner annotation), cordoned
    it, or named it in the budget's document (a waiter or a holder)."""
    for entry in o.history:
        if entry.time > before:
            break
        if entry.kind == "Node" and entry.name == node and not entry.removed:
            annotations = (entry.object.get("metadata") or {}).get("annotations") or {}
            if OWNER_ANNOTATION in annotations or entry.unschedulable:
                return True
        elif (doc := _budget_written(entry)) is not None:
            named = {str(item.get("node")) for kind in ("holders", "waiters") for item in doc.get(kind, [])}
            if node in named:
                return True
    return False


def _sweeper_stalled(o: Observation) -> dict[str, list[tuple[float, float]]]:
    """Owner -> the windows (from set to lifted) its SweeperFunction's role was without its policy."""
    faults = {fault.id: fault for fault in o.scenario.faults}
    found: dict[str, list[tuple[float, float]]] = {}
    for firing in o.firings:
        fault = faults.get(firing.fault)
        if firing.kind != "iam-detached" or fault is None or fault.target != "SweeperFunction":
            continue
        _function, owner, *_ = firing.detail.split()
        end = o.acting_at + (fault.stop if fault.stop is not None else firing.at)
        found.setdefault(owner, []).append((o.acting_at + firing.at, end))
    return found


def _ownership(o: Observation) -> Iterator[Violation]:
    group_of = {i.instance_id: i.group for i in o.instances}
    owner_of_node = {i.node_name: o.groups[i.group] for i in o.instances if i.group in o.groups}
    instance_of_node = {i.node_name: i.instance_id for i in o.instances}
    terminate = {a.instance_id: a for a in o.actions if a.transition == TERMINATING}
    last: dict[str, str | None] = {}
    cordoned: set[str] = set()

    def draining(node: str, at: float) -> bool:
        action = terminate.get(instance_of_node[node])
        return action is not None and action.started_at <= at < (action.finished_at or float("inf"))

    for entry in o.history:
        if entry.kind == "Node" and not entry.removed and entry.name in owner_of_node:
            annotations = (entry.object.get("metadata") or {}).get("annotations") or {}
            owner = annotations.get(OWNER_ANNOTATION)
            rightful = owner_of_node[entry.name]
            if owner is not None and owner != rightful:
                yield Violation("ownership", f"{entry.name} of {rightful} annotated by {owner}")
            # (an API caller's uncordon of a node under its drain, its claim kept or not: nodecycle lifts a
            # terminating node's cordon only at its cleanup, after the completion; the kubelet registering the
            # node again is no API caller's)
            freed = entry.name in cordoned and not entry.unschedulable and entry.source == API
            if freed and draining(entry.name, entry.time):
                yield Violation(
                    "ownership",
                    f"{entry.name} of {rightful} uncordoned while its drain was under way (claimed by {owner})",
                )
            if entry.unschedulable:
                cordoned.add(entry.name)
            else:
                cordoned.discard(entry.name)
            before = last.get(entry.name)
            if before is not None and owner != before and draining(entry.name, entry.time):
                yield Violation(
                    "ownership",
                    f"{entry.name}: the claim of {before} was {'cleared' if owner is None else f'taken by {owner}'} "
                    f"while its drain was under way ({entry.source} write)",
                )
            last[entry.name] = owner
        elif (doc := _budget_written(entry)) is not None:
            for kind in ("holders", "waiters"):
                for item in doc.get(kind, []):
                    group = group_of.get(item.get("instanceId", ""))
                    if group in o.groups and item.get("owner") != o.groups[group]:
                        yield Violation(
                            "ownership",
                            f"budget {kind[:-1]} of {item.get('node')} ({o.groups[group]}'s) owned by {item.get('owner')}",
                        )


def _writers(o: Observation) -> Iterator[Violation]:
    """Invariant 3 (and 12's "each function acts only on what its owner holds"), judged on who made each API write
    (the user the API server authenticated: a function's assumed-role session, its role named after its stack):
    a stack's write of another owner's node, an eviction or delete of a pod on such a node, and a write of the
    budget's document that changes another owner's entries where rules.py lets it not: a holder or waiter of that
    owner added (another owner's waiter is never granted by this one) or renewed, or removed before it expired
    (every writer removes the expired entries of every owner; a live one only its owner). Whatever the write claims
    to be for: a write that names no owner, or the right one, is judged by who asked for it. The document written
    when the ConfigMap is created again (empty) forgets every entry: none of them is removed by the writer after it."""
    if not o.stacks:
        return
    owner_of_node = {i.node_name: o.groups[i.group] for i in o.instances if i.group in o.groups}
    skew = max(
        (abs(f.value or 0.0) for f in o.scenario.faults if f.kind in ("clock-skew", "time-travel")),
        default=0.0,
    )
    story_over = _story_over(o)
    node_of_pod: dict[tuple[str, str], str] = {}
    before: dict[tuple[str, str, str], dict[str, Any]] = {}  # (kind, node, owner) -> entry, as last written
    told: set[str] = set()
    # node -> the owner its claim names (owner and in-progress annotations) and when it was cleared (None: not yet), as
    # the node was last written: what a seed of a document created again reads (domain/budget/seed.py)
    claimed_by: dict[str, tuple[str, float | None]] = {}

    def seeded_from_its_node(node: str, owner: str, at: float) -> bool:
        claim = claimed_by.get(node)
        if claim is None or claim[0] != owner:
            return False
        return claim[1] is None or at - claim[1] <= SEED_LIST_SLACK

    def once(detail: str) -> Iterator[Violation]:
        if detail not in told:
            told.add(detail)
            yield Violation("ownership", detail)

    for entry in o.history:
        if entry.kind == "Pod" and (node := (entry.object.get("spec") or {}).get("nodeName")):
            node_of_pod[(entry.namespace, entry.name)] = node
        if entry.kind == "Node":
            annotations = (entry.object.get("metadata") or {}).get("annotations") or {}
            claimant = annotations.get(OWNER_ANNOTATION)
            if not (entry.removed or not claimant or IN_PROGRESS_ANNOTATION not in annotations):
                claimed_by[entry.name] = (str(claimant), None)
            elif (claim := claimed_by.get(entry.name)) is not None and claim[1] is None:
                claimed_by[entry.name] = (claim[0], entry.time)
        doc = _budget_written(entry)
        now = _budget_entries(doc) if doc is not None else None
        writer = _owner_of_user(entry.user, o.stacks) if entry.source == API else None
        if writer is not None:
            touched: str | None = None
            if entry.kind == "Node":
                touched = entry.name
            elif entry.kind == "Pod" and (entry.resource == "pods/eviction" or entry.verb == "delete"):
                touched = node_of_pod.get((entry.namespace, entry.name))
            rightful = owner_of_node.get(touched or "")
            if touched is not None and rightful is not None and rightful != writer:
                what = (
                    "its node written"
                    if entry.kind == "Node"
                    else f"pod {entry.namespace}/{entry.name} {entry.verb}d"
                )
                yield from once(f"{touched} of {rightful}: {what} by {writer} ({_role(entry.user)})")
            if now is not None:
                for key, item in now.items():
                    kind, node, owner = key
                    if owner == writer:
                        continue
                    was = before.get(key)
                    if was is None and item.get("seeded") and seeded_from_its_node(node, owner, entry.time):
                        # (the first write to a document created again takes every owner's drain in progress as a
                        # holder, as its node shows it: domain/budget/seed.py; it grants nothing. Only a node that
                        # shows (or showed, moments before: SEED_LIST_SLACK) that owner's claim: the write's mark alone
                        # is the product's word, not what it did)
                        continue
                    if was is None:
                        yield from once(f"budget {kind} of {node} ({owner}'s) written by {writer}")
                    elif item.get("renewedAt") != was.get("renewedAt"):
                        yield from once(f"budget {kind} of {node} ({owner}'s) renewed by {writer}")
                for key, was in before.items():
                    kind, node, owner = key
                    if owner == writer or key in now:
                        continue
                    if any(k[1] == node and k[2] == writer for k in now):
                        # (node names are reused, instance ids never: an entry of another instance on the node the
                        # writer's request is for is a node gone with its instance, stale, removed as such; rules.py)
                        continue
                    expires = _expires(was)
                    if entry.time > story_over:
                        continue  # (a replay or a late sweep, its clock moved on hours: expired by that clock)
                    if expires is not None and entry.time + skew + CLOCK_SLACK < expires:
                        yield from once(
                            f"budget {kind} of {node} ({owner}'s) removed by {writer} "
                            f"{expires - entry.time:.0f}s before it expired"
                        )
        if now is not None:
            before = now
        elif _budget_deleted(entry):
            before = {}


def _budget_deleted(entry: HistoryEntry) -> bool:
    """Whether ``entry`` deleted the budget ConfigMap (every entry of its document forgotten with it)."""
    return entry.kind == "ConfigMap" and (entry.namespace, entry.name) == BUDGET[:2] and entry.removed


def _story_over(o: Observation) -> float:
    """When the story was quiescent, before the world's replays and late sweeps (whose functions' clocks it moves on
    hours or days: every entry left is expired by those clocks); the end of time when the phases do not say."""
    elapsed = 0.0
    for name, seconds in o.phases:
        elapsed += seconds
        if name == "quiescent":
            return (
                o.started_at + elapsed + 0.5
            )  # (the phases' rounding, and the run's start before started_at)
    return float("inf")


def _owner_of_user(user: str, stacks: dict[str, str]) -> str | None:
    """The owner of the stack whose function's role made the request (None: not a stack's function)."""
    role = _role(user)
    return next((owner for stack, owner in stacks.items() if role.startswith(f"{stack}-")), None)


def _role(user: str) -> str:
    """The role of an assumed-role session's user name (``arn:aws:sts::<account>:assumed-role/<role>/<session>``)."""
    _, _, after = user.partition(":assumed-role/")
    return after.split("/", 1)[0]


def _budget_entries(doc: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """The document's holders and waiters by (holder or waiter, node, owner)."""
    return {
        (kind[:-1], str(item.get("node")), str(item.get("owner"))): item
        for kind in ("holders", "waiters")
        for item in doc.get(kind, [])
    }


def _expires(item: dict[str, Any]) -> float | None:
    """When a budget entry expires (its renewal + its TTL, epoch seconds); None when it does not say."""
    renewed, ttl = item.get("renewedAt"), item.get("ttlSeconds")
    if not isinstance(renewed, str) or not isinstance(ttl, int | float):
        return None
    try:
        return datetime.fromisoformat(renewed).timestamp() + float(ttl)
    except ValueError:
        return None


def _addresses(o: Observation) -> Iterator[Violation]:
    """Invariant 4, on EC2's addresses looked at every 0.5 s. An address leaves an instance in service by no
    step of nodecycle's: the release step runs once its terminate began, the sweeper frees only gone instances'.
    So one seen on such an instance and then anywhere else (on another, free, or released) was taken from it, in
    one step or two (disassociated, then released or associated again between later looks: a sweeper that took
    a live instance for gone)."""
    instances = {i.instance_id: i for i in o.instances}

    def in_service(instance: str | None, at: float) -> bool:
        known = instances.get(instance or "")
        return known is not None and (known.terminate_started_at is None or known.terminate_started_at > at)

    reported: set[str] = set()
    previous: dict[str, tuple[str | None, dict[str, str]]] = {}
    for look in o.addresses:
        holders: dict[str, list[str]] = {}
        for allocation, (instance, _tags) in look.addresses.items():
            if instance is not None:
                holders.setdefault(instance, []).append(allocation)
            was = previous.get(allocation, (None, {}))[0]
            if was is not None and instance not in (None, was) and in_service(was, look.at):
                key = f"stolen {allocation}"
                if key not in reported:
                    reported.add(key)
                    yield Violation("addresses", f"{allocation} moved from {was} (in service) to {instance}")
        for allocation, (was, _tags) in previous.items():
            if allocation not in look.addresses and in_service(was, look.at):
                yield Violation("addresses", f"{allocation} released while {was} was in service with it")
            elif look.addresses.get(allocation, (was, {}))[0] is None and in_service(was, look.at):
                key = f"taken {allocation}"
                if key not in reported:
                    reported.add(key)
                    yield Violation(
                        "addresses", f"{allocation} disassociated from {was} while it was in service"
                    )
        for instance, allocations in holders.items():
            if len(allocations) > 1 and instance in instances and f"double {instance}" not in reported:
                reported.add(f"double {instance}")
                yield Violation(
                    "addresses", f"{instance} holds {len(allocations)} of our addresses: {allocations}"
                )
        previous = look.addresses
    ours = set(o.groups.values())
    for allocation, (instance, tags) in o.final_addresses.items():
        if tags.get(OWNER_TAG) not in ours:
            continue
        gone = (
            instance is not None and instances.get(instance) is not None and instances[instance].terminated_at
        )
        claimed_for = tags.get(INSTANCE_TAG)
        if POOL_TAG in tags:
            if gone:
                yield Violation(
                    "addresses", f"pool address {allocation} still associated with {instance}, which is gone"
                )
        elif instance is None and (claimed_for in instances or claimed_for is None):
            locked = o.locked.get(allocation)
            if locked is None:
                yield Violation(
                    "addresses",
                    f"{allocation} (for {claimed_for}) unassociated after the sweep grace: leaked",
                )
            elif locked[1] is not None:
                yield Violation(
                    "addresses",
                    f"{allocation} (for {claimed_for}), locked by AWS {locked[0] - o.acting_at:.1f}s in, still "
                    "allocated after its lock was lifted and the late sweeps: leaked",
                )
            # (still locked: left to the sweeper, as it must be; AWS Support's unlock lets it be released)
        elif gone:
            yield Violation(
                "addresses", f"{allocation} still associated with {instance}, which is gone: leaked"
            )


def _repair(o: Observation) -> Iterator[Violation]:
    if not o.quiescent:
        yield Violation("repair", f"not settled after the sweeps: {'; '.join(o.left_over[:6])}")


def _pdb(o: Observation) -> Iterator[Violation]:
    """A breach counts when evictions let it happen. Not before the story began (the workloads were still
    starting), and not once something PodDisruptionBudgets cannot stop has happened in the namespace: a
    kubelet lost (its pods turn unready whatever anyone does), a node gone with its pods still running (an
    instance terminated: whether that was too early is the "drain" invariant's question), a forced delete at
    the drain timeout (its policy).

    A node whose kubelet posts it NotReady (its container runtime hung: "PLEG is not healthy") has its pods marked
    NotReady by the node lifecycle controller as a lost kubelet's are (MarkPodsNotReady, for a Ready condition
    turned False as for one turned Unknown): that excuses too, from the moment its node turned, when it still had
    pods a budget counted healthy.

    A node goes with its instance, not when the cloud provider deletes its Node object: its kubelet goes at
    once, and the node lifecycle controller marks its pods NotReady after its monitor grace, seconds before
    the node is deleted and, after the pod GC's quarantine, its pods. So the instance's end excuses, when its
    node still had pods a budget counted healthy. A controller's removal of a pod (the pod GC, the taint
    manager, a ReplicaSet scaled down) excuses only a pod that was healthy (a node deleted with its instance
    still there): not the DaemonSet and mirror pods every node has and no drain evicts, nor a Pending pod,
    which no budget counted.

    A DELETE of a pod through the API (nodecycle's: nothing else in a scenario deletes pods) is no eviction:
    no budget is asked. It excuses only as the force policy's: once its node's drain timeout was over (see
    :func:`_forced_from`), and only the breaches of the budgets that select that pod. A drain that deleted
    instead of evicting, or forced before its timeout, is judged by the breaches it made."""
    excused_from = o.lost_kubelet[1] if o.lost_kubelet else float("inf")
    for instance in o.instances:
        ended = instance.terminated_at
        if ended is None or not o.acting_at <= ended < excused_from:
            continue
        if healthy_pods_on_at(o.history, instance.node_name, ended):
            excused_from = ended
    for not_ready, turned in _turned_not_ready(o):
        if turned < excused_from and healthy_pods_on_at(o.history, not_ready, turned):
            excused_from = turned
    forced_from = _forced_from(o)
    budgets = budgets_of(o.history)
    # budget -> the first forced delete of one of its pods past its node's drain timeout
    excused_for: dict[str, float] = {}
    for entry in o.history:
        if entry.kind != "Pod" or entry.time < o.acting_at or entry.verb != "delete":
            continue
        if entry.source != "api":
            if entry.removed and counted_healthy(entry.object):
                excused_from = min(excused_from, entry.time)
            continue
        node = (entry.object.get("spec") or {}).get("nodeName")
        if node is None or entry.time < forced_from.get(node, float("inf")):
            continue  # deleted where the drain should have evicted: excuses nothing
        labels = (entry.object.get("metadata") or {}).get("labels") or {}
        for budget, (namespace, selector) in budgets.items():
            if namespace == entry.namespace and selects(selector, labels):
                excused_for.setdefault(budget, entry.time)
    for breach in pdb_breaches(o.history):
        if breach.time < o.acting_at or breach.time >= min(
            excused_from, excused_for.get(breach.budget, excused_from)
        ):
            continue
        yield Violation(
            "pdb",
            f"{breach.budget}: {breach.healthy} healthy pods, {breach.desired} required "
            f"({breach.time - o.acting_at:.1f}s in)",
        )
        return  # one breach tells it; the following moments are the same breach


def _turned_not_ready(o: Observation) -> Iterator[tuple[str, float]]:
    """(node, when) for each write of the story that turned a node's Ready condition from True to False: what a
    live kubelet posts (a hung runtime's PLEG). Unknown, the node lifecycle controller's mark of a kubelet gone, is
    judged by the kubelet's loss or its instance's end, whichever came first, not here."""
    ready: dict[str, bool] = {}
    for entry in o.history:
        if entry.kind != "Node" or entry.removed:
            continue
        posted_false = (condition(entry.object, "Ready") or {}).get("status") == "False"
        if ready.get(entry.name, False) and posted_false and entry.time >= o.acting_at:
            yield entry.name, entry.time
        ready[entry.name] = node_ready(entry.object)


def _forced_from(o: Observation) -> dict[str, float]:
    """Node -> the earliest moment the force policy may delete its pods: its drain's timeout after the drain
    began, less the scenario's clock skew (the product reads the start and the time on functions' clocks,
    one of which a fault may move). The drain begins at its node's first cordon once its terminate action
    started, or at its first cordon a fault refused or left undone, or at a read of its node a fault failed once
    the budget had granted it its slot (the product's drain time runs since its first try, and the cordon reads
    the node before it patches it), whichever is first. (A read of the node failed before the grant is the slot's
    ask, no drain yet.) Its deadline is capped before the action's global timeout, where the policy still has time
    to act (``DRAIN_TAIL_LONGEST``); a scheduled maintenance's drain, from its node's first cordon before the
    start, is capped only by the force's needs before the start (``MAINTENANCE_TAIL_LONGEST``). A node with no drain has no such moment. A first cordon that lands begins
    the drain when it lands, however long its step took to read the node and confirm its slot before the PATCH (a
    slow API server, ``kube-slow``): the pods are promised the whole drain timeout after the cordon, and the
    product dates its drain from the PATCH's answer (seeds 66 and 219 saw forced deletes early by that step's
    latency, before it did)."""
    skew = max((abs(f.value or 0.0) for f in o.scenario.faults if f.kind == "clock-skew"), default=0.0)
    nodes = o.nodes_of
    holding = _holding(o)
    begun: dict[str, float] = {}
    deadline: dict[str, float] = {}
    for action in o.actions:
        node = nodes.get(action.instance_id)
        if action.transition != TERMINATING or node is None:
            continue
        cordons = [
            e.time
            for e in o.history
            if e.kind == "Node" and e.name == node and e.unschedulable and e.time >= action.started_at
        ]
        granted = min((t for t in holding.get(node, ()) if t >= action.started_at), default=float("inf"))
        tries = [
            o.acting_at + f.at
            for f in o.firings
            if f.kind in _NOT_DONE
            and (
                f.detail.split()[:3] == ["PATCH", "nodes", node]
                or (f.detail.split()[:3] == ["GET", "nodes", node] and o.acting_at + f.at >= granted)
            )
            and o.acting_at + f.at >= action.started_at
        ]
        if granted != float("inf"):
            tries += _stormed(o, granted, min(cordons, default=float("inf")))
            tries += _confirmations_failed(o, granted, min(cordons, default=float("inf")))
        if cordons or tries:
            begun[node] = min(begun.get(node, float("inf")), *cordons, *tries)
            deadline[node] = action.global_deadline - DRAIN_TAIL_LONGEST
    for instance, starts in o.maintenances.items():
        # (a maintenance's drain: from its node's first cordon before the start, capped by the start; with a
        # terminate action's drain on the node too, the earlier of the two moments, early never late)
        node = nodes.get(instance)
        cordons = [
            e.time
            for e in o.history
            if e.kind == "Node" and e.name == node and e.unschedulable and o.acting_at <= e.time < starts
        ]
        if node is not None and cordons:
            begun[node] = min(begun.get(node, float("inf")), *cordons)
            deadline[node] = min(deadline.get(node, float("inf")), starts - MAINTENANCE_TAIL_LONGEST)
    return {node: min(at + DRAIN_TIMEOUT, deadline[node]) - skew for node, at in begun.items()}


def _confirmations_failed(o: Observation, granted: float, cordoned: float) -> list[float]:
    """When a request of the budget ConfigMap that a fault failed or refused arrived between the grant of a drain's
    slot at ``granted`` and its cordon at ``cordoned``: the cordon step confirms the slot there before its PATCH, and
    a confirmation that fails (a 5xx or 429 the store does not retry, a dropped connection) or is refused (RBAC, a
    webhook) is a failing or refused try of the cordon, whose time the product counts as the drain's since that
    step began; its cordon lands a retry later. Not a 409: the store reads and writes again itself, and only a storm
    past its retries fails the step (``_stormed``). Whoever's request it was: the judge may begin a drain early by
    that window, never late."""
    found = []
    for firing in o.firings:
        at = o.acting_at + firing.at
        if firing.kind not in _NOT_DONE or firing.kind == "kube-conflict":
            continue
        if firing.detail.split()[1:3] == ["configmaps", BUDGET[1]] and granted <= at <= cordoned:
            found.append(at)
    return found


def _holding(o: Observation) -> dict[str, list[float]]:
    """Node -> the moments the budget's document was written with the node among its holders."""
    holding: dict[str, list[float]] = {}
    for entry in o.history:
        if (doc := _budget_written(entry)) is not None:
            for item in doc.get("holders", []):
                holding.setdefault(str(item.get("node")), []).append(entry.time)
    return holding


def _grants(o: Observation) -> dict[str, list[float]]:
    """Node -> the moments the budget's document was written with the node among its holders where the write
    before did not name it there: each grant of its slot."""
    grants: dict[str, list[float]] = {}
    holders: set[str] = set()
    for entry in o.history:
        if (doc := _budget_written(entry)) is not None:
            now = {str(item.get("node")) for item in doc.get("holders", [])}
            for node in sorted(now - holders):
                grants.setdefault(node, []).append(entry.time)
            holders = now
    return grants


def _budget_written(entry: HistoryEntry) -> dict[str, Any] | None:
    """The budget document ``entry`` wrote, when it is a write of the budget ConfigMap (None otherwise)."""
    if entry.kind != "ConfigMap" or (entry.namespace, entry.name) != BUDGET[:2] or entry.removed:
        return None
    doc: dict[str, Any] = json.loads(((entry.object.get("data") or {}).get(BUDGET[2])) or "{}")
    return doc


def _slot_held(o: Observation) -> Iterator[Violation]:
    """The drain's span: from its slot's grant (the budget's document naming its node among the holders, the
    write before it not, once its action began: the last such grant before its cordon), or from its cordon when
    no grant came before it, until nodecycle first asks Auto Scaling to complete the action, whether or not Auto
    Scaling refuses. Retries of a refused completion (AWS throttling for minutes) keep the slot, rightly: the node
    stays cordoned until it goes. They are not the drain; invariants 2 and 11 judge them. (Not "until the pods are gone": a drain that failed to see them go would hide there.) A
    slot granted to a node whose cordon never lands (every PATCH refused) or lands late is held all the same:
    the other drains wait for it. A slot the budget's document still names once the action completed is held
    until its holder entry leaves the document (the cleanup's release, or the sweeper's of an expired holder):
    the time from the completion to that write counts too, not the time the completion was refused. The other
    drains wait on what the document says, not on what the drain thinks it holds."""
    first_cordon: dict[str, float] = {}
    for entry in o.history:
        if entry.kind == "Node" and entry.unschedulable and entry.name not in first_cordon:
            first_cordon[entry.name] = entry.time
    grants = _grants(o)
    asked: dict[str, float] = {}  # instance -> the first refused CompleteLifecycleAction naming it
    for firing in o.firings:
        operation, *instances = firing.detail.split()
        if operation == "autoscaling.CompleteLifecycleAction":
            for instance in instances:
                asked.setdefault(instance, o.acting_at + firing.at)
    limit = DRAIN_TIMEOUT + FORCE_GRACE + SLOT_MARGIN
    nodes = o.nodes_of
    held_up = _deliveries_held_up(o)
    deletes_failed = _deletes_failed(o)
    kills = [o.acting_at + f.at for f in o.firings if f.kind == "worker-kill" and f.detail in COMPLETERS]
    writes_denied = _record_writes_denied(o)
    stalled = _stalled(o)
    for action in o.actions:
        node = nodes.get(action.instance_id)
        if action.transition != TERMINATING or node is None or action.finished_at is None:
            continue
        granted = [t for t in grants.get(node, ()) if t >= action.started_at - CLOCK_SLACK]
        cordon = first_cordon.get(node)
        if cordon is not None:
            # (the grant its cordon went ahead on: a wait for a slot again, lost before the cordon, is no hold)
            began = max((t for t in granted if t <= cordon), default=cordon)
        elif granted:
            began = granted[0]
        else:
            continue
        ended = min(action.finished_at, asked.get(action.instance_id, action.finished_at))
        # (still named a holder once nodecycle completed the action: held until the write that no longer names it.
        # An action Auto Scaling ended itself is "global-timeout"'s to judge, and its drain finds out later.)
        completed = action.outcome == "completed"
        released = _released_after(o, node, began, action.finished_at) if completed else action.finished_at
        tail = max(0.0, released - action.finished_at)
        held = ended - began + tail
        if tail > 0.0 and _release_failed(o, node, action.finished_at, released):
            excused_release = RELEASE_FAILING_COST
        else:
            excused_release = 0.0
        ended = max(ended, released)
        excused = sum(cost for at, cost in held_up.get(action.instance_id, ()) if began <= at <= ended)
        if any(began <= at <= ended for at in deletes_failed.get(node, ())):
            excused += FORCED_DELETE_SLACK
        if any(began <= at <= ended for at in kills) or any(
            began <= at <= ended for at in writes_denied.get(action.instance_id, ())
        ):
            excused += KILLED_COMPLETER_COST
        for begin, end in stalled.get(o.groups.get(action.group, ""), ()):
            if begin <= ended and end >= began:
                excused += min(end, ended) - max(begin, began) + OUTAGE_RECOVERY
        excused += excused_release
        before = _before_cordon(o, node, began, cordon)
        if held > limit + before + excused:
            dead = " (its kubelet was lost)" if o.lost_kubelet and o.lost_kubelet[0] == node else ""
            finished = action.finished_at - began
            start = "cordon" if began == first_cordon.get(node) else "grant of its slot"
            late = (
                f" + {excused:.0f}s its own messages, deletes or completer were held up by faults"
                if excused
                else ""
            )
            if before:
                late = f" + {before:.0f}s before its cordon{late}"
            kept = f", its holder entry left the budget {tail:.0f}s after that" if tail else ""
            yield Violation(
                "slot-held",
                f"{node}{dead} held its slot {held:.0f}s (limit {limit:.0f}s{late}); its action was completed "
                f"{finished:.0f}s after the {start}{kept}",
            )


def _released_after(o: Observation, node: str, began: float, completed: float) -> float:
    """When the budget's document, naming ``node`` among its holders at ``completed`` (its slot taken at or
    after ``began``), was first written without it after that: the slot given back. ``completed`` itself when the
    document did not name it then (given back before, or never held); the end of the history when it never left
    (reported as unsettled by "repair" too, unless the history goes on)."""
    holding = False
    for entry in o.history:
        if (doc := _budget_written(entry)) is None or entry.time < began - CLOCK_SLACK:
            continue
        named = node in {str(item.get("node")) for item in doc.get("holders", [])}
        if entry.time <= completed:
            holding = named
        elif not holding:
            return completed
        elif not named:
            return entry.time
    if not holding:
        return completed
    return max(completed, max((entry.time for entry in o.history), default=completed))


def _release_failed(o: Observation, node: str, completed: float, released: float) -> bool:
    """Whether a fault failed or refused one of the cleanup's requests between the completion and the slot given
    back: a read or PATCH of ``node``, a request of the budget ConfigMap (see RELEASE_FAILING_COST)."""
    for firing in o.firings:
        at = o.acting_at + firing.at
        if firing.kind not in _NOT_DONE or not completed - CLOCK_SLACK <= at <= released:
            continue
        words = firing.detail.split()
        if words[1:3] in (["nodes", node], ["configmaps", BUDGET[1]]):
            return True
    return False


def _before_cordon(o: Observation, node: str, began: float, cordon: float | None) -> float:
    """How long the slot granted to ``node`` at ``began`` stood before the drain's time started, up to
    PRE_CORDON_SLACK: until its first cordon landed (``cordon``), or the first try of it a fault failed or refused
    before (a PATCH of the node, its read, the slot's confirmation: see ``_forced_from``), where the product starts
    the drain's time."""
    landed = float("inf") if cordon is None else cordon
    tries = [*_stormed(o, began, landed), *_confirmations_failed(o, began, landed)]
    tries += [
        o.acting_at + f.at
        for f in o.firings
        if f.kind in _NOT_DONE
        and f.detail.split()[:1] in (["PATCH"], ["GET"])
        and f.detail.split()[1:3] == ["nodes", node]
        and o.acting_at + f.at >= began
    ]
    started = min(landed, *tries) if tries else landed
    if started == float("inf"):
        return 0.0
    return min(max(0.0, started - began), PRE_CORDON_SLACK)


def _record_writes_denied(o: Observation) -> dict[str, list[float]]:
    """Instance -> when a DynamoDB write of its lifecycle records was denied (see RECORD_WRITES)."""
    found: dict[str, list[float]] = {}
    for firing in o.firings:
        operation, *instances = firing.detail.split()
        if firing.kind != "aws-denied" or operation not in RECORD_WRITES:
            continue
        for instance in instances:
            found.setdefault(instance, []).append(o.acting_at + firing.at)
    return found


def _stalled(o: Observation) -> dict[str, list[tuple[float, float]]]:
    """Owner -> the windows (from set to lifted) of the outages that stalled one of its completing functions."""
    faults = {fault.id: fault for fault in o.scenario.faults}
    found: dict[str, list[tuple[float, float]]] = {}
    for firing in o.firings:
        fault = faults.get(firing.fault)
        if firing.kind not in STALLING_OUTAGES or fault is None or fault.target not in COMPLETERS:
            continue
        _function, owner, *_ = firing.detail.split()
        # (lifted at its stop, or sooner once the story settled; a look's interval late at most)
        end = o.acting_at + (fault.stop if fault.stop is not None else firing.at) + 0.5
        found.setdefault(owner, []).append((o.acting_at + firing.at, end))
    return found


def _stormed(o: Observation, granted: float, cordoned: float) -> list[float]:
    """When a third writer's storm of the budget ConfigMap (chaos/outages.py) could first have met the cordon
    step of a drain granted at ``granted`` and cordoned at ``cordoned``: the step renews the budget document
    before it patches the node, and 409s past the store's retries fail that renewal, a failing try of the cordon,
    whose time the product counts as the drain's since the step began. The judge may begin a drain early by that
    window, never late."""
    faults = {fault.id: fault for fault in o.scenario.faults}
    found = []
    for firing in o.firings:
        fault = faults.get(firing.fault)
        if firing.kind != "budget-third-writer" or fault is None:
            continue
        begin = o.acting_at + firing.at
        end = o.acting_at + (fault.stop if fault.stop is not None else firing.at) + 0.5
        if begin <= cordoned and end >= granted:
            found.append(max(begin, granted))
    return found


def _deletes_failed(o: Observation) -> dict[str, list[float]]:
    """Node -> when a delete of one of its pods got an injected fault instead of an answer (``DELETE pods
    <name>``): a refusal (a webhook, RBAC), a server error, a dropped connection."""
    node_of = {
        entry.name: (entry.object.get("spec") or {}).get("nodeName")
        for entry in o.history
        if entry.kind == "Pod" and (entry.object.get("spec") or {}).get("nodeName")
    }
    found: dict[str, list[float]] = {}
    for firing in o.firings:
        words = firing.detail.split()
        if firing.kind not in _NOT_DONE or words[:2] != ["DELETE", "pods"] or len(words) < 3:
            continue
        node = node_of.get(words[2])
        if node is not None:
            found.setdefault(node, []).append(o.acting_at + firing.at)
    return found


def _deliveries_held_up(o: Observation) -> dict[str, list[tuple[float, float]]]:
    """Instance -> (when, seconds) for each injected late or lost delivery of a message about it."""
    values = {fault.id: fault.value for fault in o.scenario.faults}
    found: dict[str, list[tuple[float, float]]] = {}
    for firing in o.firings:
        if firing.kind == "sqs-delay":
            cost = max(1.0, round(values.get(firing.fault, 0.0)))
        elif firing.kind == "sqs-drop":
            cost = LOST_MESSAGE_COST
        elif firing.kind == "sqs-reorder" and firing.detail.split()[1:4] == ["batch", "of", "1"]:
            # a lone message held back a second (runner/faults.py); a shuffled batch is late by nothing
            _queue, _batch, _of, _one, *instances = firing.detail.split()
            for instance in instances:
                found.setdefault(instance, []).append((o.acting_at + firing.at, REORDER_HOLD))
            continue
        else:
            continue
        _queue, _message, *instances = firing.detail.split()
        for instance in instances:
            found.setdefault(instance, []).append((o.acting_at + firing.at, cost))
    return found


def _precedence(o: Observation) -> Iterator[Violation]:
    """Design invariant 9, on what the world recorded (its second clause, a waiter near its global deadline goes
    first, in :func:`_urgent_passed`). (1) A drain in progress keeps precedence: a write of the
    budget document that grants a slot to a node not yet touched (no drain in progress: see :func:`_granted_in_progress`)
    must not take the room of a waiter whose drain is in progress (its entry's ``inProgress``: the product's
    request, cordon.py and evict.py, whatever its node shows now: uncordoned by someone else, deleted, registered
    again; or its node's in-progress annotation naming the lifecycle of its terminate action, whatever its request
    said: its cordon landed, with that claim, though its step's commit may have been lost) and whose terminate
    action is open: one that fitted beside the holders without the newcomer and no longer does with it. A newcomer whose action's
    global timeout is near enough to be forced past the budget is excused (it goes either way). (2) Time spent
    waiting for a slot never counts against the drain's timeout: no pod of the node is deleted (the force policy)
    before the drain's own timeout after it began (``_forced_from``: early never late).

    One budget ConfigMap is read (``BUDGET``): every stack of the campaign is deployed with the template's
    BudgetNamespace, so they share it, and no scenario splits the budget. Stacks of different BudgetNamespaces
    would each keep their own line, and this judge would see one of them only."""
    instance_of = {node: instance for instance, node in o.nodes_of.items()}
    open_at: dict[str, list[tuple[float, float, float]]] = {}  # node -> (start, end, global deadline)
    tokens: dict[str, list[tuple[float, float, str]]] = {}  # node -> (start, end, lifecycle token)
    for action in o.actions:
        node = o.nodes_of.get(action.instance_id)
        if action.transition == TERMINATING and node is not None:
            end = action.finished_at if action.finished_at is not None else float("inf")
            open_at.setdefault(node, []).append((action.started_at, end, action.global_deadline))
            tokens.setdefault(node, []).append((action.started_at, end, action.token))
    skew = max((abs(f.value or 0.0) for f in o.scenario.faults if f.kind == "clock-skew"), default=0.0)
    forced_may_begin = DRAIN_TIMEOUT + DRAIN_TAIL_LONGEST + skew  # the product's full drain, rounded up
    # node -> the lifecycles (tokens) its in-progress annotation named so far
    claimed: dict[str, set[str]] = {}
    before: dict[str, Any] = {}
    seen = float("-inf")  # when ``before`` was written
    told: set[tuple[str, str]] = set()
    for entry in o.history:
        if entry.kind == "Node":
            if (token := _claim_token(entry)) is not None:
                claimed.setdefault(entry.name, set()).add(token)
            continue
        if (doc := _budget_written(entry)) is None:
            continue
        holders = {str(h.get("node")): h.get("zone") for h in doc.get("holders", [])}
        was = {str(h.get("node")) for h in before.get("holders", [])}
        waited = {str(w.get("node")) for w in before.get("waiters", [])}
        now = entry.time
        for granted in sorted(set(holders) - was):
            if _granted_in_progress(
                granted, before, claimed.get(granted, set()), tokens.get(granted, ()), now
            ):
                # a drain in progress itself: it goes first of all, but after the drains in progress older in line
                yield from _older_passed(o, granted, before, doc, now, open_at, skew, told)
                continue
            if any(
                start <= now < end and now >= deadline - forced_may_begin
                for start, end, deadline in open_at.get(granted, ())
            ):
                continue  # near its global timeout: forced past the budget, as it may be
            for waiter in doc.get("waiters", []):
                node = str(waiter.get("node"))
                if node not in waited or node in holders:
                    continue
                if not (
                    _asked_in_progress(before, node)
                    or _claimed_open(claimed.get(node, set()), tokens.get(node, ()), now)
                ):
                    continue
                if not any(start <= now < end for start, end, _ in open_at.get(node, ())):
                    continue  # a waiter's entry left behind by an action over: no drain to precede
                if _room_taken(waiter, node, granted, holders, told):
                    yield Violation(
                        "precedence",
                        f"{granted}, not yet touched, granted a slot at {now - o.acting_at:.1f}s that {node} "
                        f"({instance_of.get(node)}), a drain in progress waiting, fitted in",
                    )
            yield from _urgent_passed(o, granted, before, doc, entry.time, seen, open_at, skew, told)
        before, seen = doc, entry.time
    forced_from = _forced_from(o)
    node_of_pod: dict[tuple[str, str], str] = {}
    for entry in o.history:
        if entry.kind != "Pod":
            continue
        if node := (entry.object.get("spec") or {}).get("nodeName"):
            node_of_pod[(entry.namespace, entry.name)] = node
        if entry.source != API or entry.verb != "delete" or entry.resource == "pods/eviction":
            continue
        node = node_of_pod.get((entry.namespace, entry.name))
        if node is None or node not in instance_of:
            continue
        due = forced_from.get(node)
        if due is not None and entry.time < due - CLOCK_SLACK:
            yield Violation(
                "precedence",
                f"pod {entry.namespace}/{entry.name} on {node} deleted at {entry.time - o.acting_at:.1f}s, "
                f"{due - entry.time:.1f}s before its drain's own timeout was over",
            )


def _granted_in_progress(
    granted: str,
    before: dict[str, Any],
    claims: set[str],
    actions: Iterable[tuple[float, float, str]],
    now: float,
) -> bool:
    """Whether ``granted``, granted a slot at ``now`` over ``before``, asked as a drain in progress (the replay's
    first class, rules.py): what its request said, not what its node shows. From its place in line, its waiter's
    entry says it (``inProgress``); as a newcomer (its holder's expiry removed by another write, then asked again),
    its drain began when its node's in-progress annotation named the lifecycle of a terminate action of it open now
    (domain/drain/cordon.py sets it in the cordon's PATCH; the drain asks in progress from then on, cordon.py and
    evict.py). Its node may have been uncordoned since by someone else (``kubectl uncordon`` keeps annotations),
    deleted, or registered again under its name: still a drain in progress. A node cordoned by an operator, or left
    cordoned by a lifecycle over, asks as one not yet touched, and is judged so."""
    waiter = next((w for w in before.get("waiters") or [] if str(w.get("node")) == granted), None)
    if waiter is not None:
        return bool(waiter.get("inProgress"))
    return _claimed_open(claims, actions, now)


def _claimed_open(claims: set[str], actions: Iterable[tuple[float, float, str]], now: float) -> bool:
    """Whether a node's in-progress annotation named (``claims``, its tokens so far) the lifecycle of one of its
    terminate ``actions`` open at ``now``: that drain's cordon landed (the claim comes with it, one PATCH), so its
    node is disrupted and its drain in progress, whatever the step's commit after it told its record."""
    return any(start <= now < end and token in claims for start, end, token in actions)


def _older_passed(
    o: Observation,
    granted: str,
    before: dict[str, Any],
    doc: dict[str, Any],
    now: float,
    open_at: dict[str, list[tuple[float, float, float]]],
    skew: float,
    told: set[tuple[str, str]],
) -> Iterator[Violation]:
    """Design invariant 9 among drains in progress, on one write of the budget (``doc``, at ``now``, over ``before``)
    that grants ``granted``, a drain in progress from its place in line, a slot: the oldest in line goes first
    (rules.py's replay, its first class, by ``waitingSince``). A waiter in progress, older by more than two clocks'
    skew (each reader sees the stamps moved onto its own clock: BudgetDocument.on_clocks), that fitted beside the
    holders without ``granted`` and no longer does with it, was passed over. A newcomer's place is not judged: it
    joins as of its ask, or as of its wait before the ConfigMap was created again (rules.py's _queued, _joined)."""
    mine = _waiting_since(before, granted)
    if mine is None:
        return
    holders = {str(h.get("node")): h.get("zone") for h in doc.get("holders", [])}
    waiting = {str(w.get("node")) for w in doc.get("waiters", [])}
    for waiter in before.get("waiters") or []:
        node = str(waiter.get("node"))
        since = _waiting_since(before, node)
        if node not in waiting or node in holders or not waiter.get("inProgress") or since is None:
            continue
        if since >= mine - 2 * skew - CLOCK_SLACK:
            continue  # (not older for certain in every reader's view)
        if not any(start <= now < end for start, end, _ in open_at.get(node, ())):
            continue  # a waiter's entry left behind by an action over
        if _room_taken(waiter, node, granted, holders, told):
            yield Violation(
                "precedence",
                f"{granted}, a drain in progress in line since {mine - o.acting_at:.1f}s, granted a slot at "
                f"{now - o.acting_at:.1f}s that {node} ({waiter.get('owner')}), in progress and in line since "
                f"{since - o.acting_at:.1f}s, fitted in",
            )


def _waiting_since(doc: dict[str, Any], node: str) -> float | None:
    """Since when ``node``'s waiter in ``doc`` waits in line (its ``waitingSince``, epoch seconds); None: not told."""
    stamp = next(
        (w.get("waitingSince") for w in doc.get("waiters") or [] if str(w.get("node")) == node), None
    )
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None


def _asked_in_progress(doc: dict[str, Any], node: str) -> bool:
    """Whether ``node``'s waiter in ``doc`` asked as a drain in progress (its entry's ``inProgress``, left out when
    false: document.py's to_json)."""
    return any(str(w.get("node")) == node and bool(w.get("inProgress")) for w in doc.get("waiters") or [])


def _claim_token(entry: HistoryEntry) -> str | None:
    """The lifecycle token that node ``entry``'s in-progress annotation names (None: none, or unreadable)."""
    if entry.removed:
        return None
    stamp = ((entry.object.get("metadata") or {}).get("annotations") or {}).get(IN_PROGRESS_ANNOTATION)
    try:
        progress = json.loads(stamp) if isinstance(stamp, str) else None
    except ValueError:
        return None
    token = progress.get("token") if isinstance(progress, dict) else None
    return token if isinstance(token, str) else None


def _urgent_passed(
    o: Observation,
    granted: str,
    before: dict[str, Any],
    doc: dict[str, Any],
    now: float,
    seen: float,
    open_at: dict[str, list[tuple[float, float, float]]],
    skew: float,
    told: set[tuple[str, str]],
) -> Iterator[Violation]:
    """Design invariant 9's second clause on one write of the budget (``doc``, at ``now``, over ``before``, written
    at ``seen``) that grants ``granted`` a slot, not as a drain in progress (which goes first of all): a
    waiter near its global deadline goes first, whichever stack it belongs to. A waiter whose ``urgentAt`` had passed
    in every writer's view (by ``seen``, the document's read, less the scenario's clock skew: the writer compares it
    with its own clock), that fitted beside the holders without ``granted`` and no longer does with it, is passed
    over by a grant that does not go before it: one not near its deadline, or nearer later (a later ``urgentAt``, as
    its waiter's entry recorded it; a newcomer's, unrecorded, by its action's global deadline, apart by more than
    what two intakes' clocks move them). Every stack replays the same document, so a grant by either stack, to
    either stack's node, is judged alike (the campaign's stacks have the same limits)."""
    mine = _urgent_at((before.get("waiters") or []), granted)
    queued = any(str(w.get("node")) == granted for w in before.get("waiters") or [])
    deadlines = [d for start, end, d in open_at.get(granted, ()) if start <= now < end]
    holders = {str(h.get("node")): h.get("zone") for h in doc.get("holders", [])}
    waiting = {str(w.get("node")) for w in doc.get("waiters", [])}
    for waiter in before.get("waiters") or []:
        node = str(waiter.get("node"))
        urgent = _urgent_at([waiter], node)
        if node not in waiting or node in holders or urgent is None or urgent > seen - skew - CLOCK_SLACK:
            continue  # (granted, gone, or not near its deadline for certain in the writer's view)
        if (expires := _expires(waiter)) is not None and expires <= now + skew:
            continue  # (its place expired: no drain asks for it)
        open_for = [d for start, end, d in open_at.get(node, ()) if start <= now < end]
        if not open_for:
            continue  # a waiter's entry left behind by an action over
        if mine is not None and mine <= urgent:
            continue  # near its deadline as soon or sooner: it may go first
        if (
            mine is None
            and not queued
            and (not deadlines or any(d <= min(open_for) + 2 * skew + CLOCK_SLACK for d in deadlines))
        ):
            continue  # a newcomer whose own deadline is as near as far as the clocks tell, or not told
        if _room_taken(waiter, node, granted, holders, told):
            yield Violation(
                "precedence",
                f"{granted} granted a slot at {now - o.acting_at:.1f}s that {node} "
                f"({waiter.get('owner')}), waiting near its global deadline since "
                f"{urgent - o.acting_at:.1f}s, fitted in",
            )


def _urgent_at(waiters: list[dict[str, Any]], node: str) -> float | None:
    """When the waiter of ``node`` among ``waiters`` became near its global deadline (its ``urgentAt``, epoch
    seconds); None when it waits not, or does not say."""
    stamp = next((w.get("urgentAt") for w in waiters if str(w.get("node")) == node), None)
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None


def _room_taken(
    waiter: dict[str, Any], node: str, granted: str, holders: dict[str, Any], told: set[tuple[str, str]]
) -> bool:
    """Whether the grant to ``granted`` took the room ``waiter`` (of ``node``) fitted in: it fits beside the holders
    but the granted one, not beside them all. Once per grant and waiter (``told`` keeps those said)."""
    rest = {n: z for n, z in holders.items() if n != granted}
    if (granted, node) in told or not _fits(waiter.get("zone"), rest) or _fits(waiter.get("zone"), holders):
        return False
    told.add((granted, node))
    return True


def _fits(zone: str | None, holders: dict[str, Any]) -> bool:
    """Whether one more node of ``zone`` fits beside ``holders`` (node -> zone) under the campaign's limits; a node
    of unknown zone counts against every zone."""
    if len(holders) + 1 > LIMITS["total"]:
        return False
    load = sum(1 for z in holders.values() if z is None or zone is None or z == zone)
    return load + 1 <= LIMITS["per_zone"]
