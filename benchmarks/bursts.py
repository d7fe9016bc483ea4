"""Benchmark: hundreds of lifecycle actions at once, end to end in the sandbox.

A group scales out from 0 to N instances in one step (N launch actions at once), then in from N to 0 (N
terminate actions at once, a scale-in). The hooks notify the intake queue as well as EventBridge, as a hook
with an SQS target does in AWS (every action arrives twice; intake keeps one), so intake runs with the
template's queue settings (batch size, concurrency), as the drain function does with its own. The nodes
have no pods: what is measured is intake, the record writes and each lifecycle's first step, not drains.
The functions' containers are started before the bursts (see harness.WARM).

- launches: from the scale-out to the last lifecycle record written, and to the last first step run (the
  readiness gate's first look at its node);
- terminations: from the scale-in to the last record written, and to the last slot decision (the moment
  the last node entered the budget ConfigMap, as a holder or a waiter: with a budget of 10, nearly all of
  them wait);
- the budget under that load: slot decisions (each run of a waiting lifecycle's step) per second, and
  409 conflicts per decision, counted by the API server (write requests minus writes kept);
- the CPU of one ask on the longest budget document of the scale-in, in process once the sandbox is gone:
  a newcomer's ask through the budget service (the decision and the wake-up list), beside the decision
  alone (what a write computed before wake-ups), each with the document's JSON read and write; and the same
  ask through the ConfigMap store the functions use (the clock note of each entry, the Date's lead, the
  ConfigMap's data checked and rebuilt), over an API client that answers at once. The longer a
  read-modify-write, the more of them lose the race (409) under a burst: a store that took 2 ms more an ask
  at 400 waiters (stamps parsed with a time zone of their own, each compared by a Python call) made 30 % more
  conflicts and a last slot decision 20 % later, which the wall-clock figures alone, noisy on two cores, hid.

Times come from the sandbox's records: the records' ``received_at`` as DynamoDB holds them, the runner's
journal (each invocation, with the messages it carried) and the API server's write history. They are
timing figures, of the sandbox on this machine: the sandbox's load is reported with them.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

from kubernetes.client import V1ConfigMap, V1ObjectMeta

from benchmarks import load
from benchmarks.contention import _NoMetrics
from benchmarks.harness import sandbox as start_sandbox
from benchmarks.records import BUDGET_KEY, BUDGET_NAME, BUDGET_NAMESPACE, budget_writes
from benchmarks.report import Result, Row
from nodecycle.adapters.kube.budget import ConfigMapBudgetStore
from nodecycle.domain.budget import BudgetDocument, BudgetLimits, DisruptionBudget, SlotRequest, rules
from nodecycle.domain.budget.limits import NodeState
from nodecycle.domain.policy import Quantity
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.group import wait_for

BUDGET = 10
PARAMETERS = {"BudgetMaxUnavailable": str(BUDGET), "EipMode": "off"}  # the template's queue settings


@dataclass(frozen=True)
class Burst:
    transition: str
    size: int
    last_record: float  # seconds from the scaling call to the last record written
    last_first_step: float  # to the last lifecycle's first step (launches) or slot decision (terminations)
    invocations: dict[str, int]  # function -> invocations during the burst
    load: list[str]


@dataclass(frozen=True)
class Contention:
    decisions: int
    seconds: float
    conflicts: int
    configmap_requests: int
    wakes: int  # slot decisions run by a wake-up message
    freed: int  # holders that left the budget (slots freed)
    longest: dict[str, str]  # the ConfigMap's data with the longest budget document written during the burst


@dataclass(frozen=True)
class AskCpu:
    waiters: int
    ours: float  # CPU seconds of a newcomer's ask through the budget service
    decision: float  # of the decision alone, without the wake-up list
    stored: float  # of the ask through the ConfigMap store


@dataclass(frozen=True)
class Bursts:
    launches: Burst
    terminations: Burst
    contention: Contention
    ask: AskCpu


def run(size: int, log_dir: Path, warm: int | None = None) -> Bursts:
    """Scale a group out to ``size`` and back in, measuring each burst (``warm``: see harness.sandbox)."""
    with start_sandbox(parameters=PARAMETERS, size=0, log_dir=log_dir, hook_target="sqs", warm=warm) as box:
        launches = _launch(box, size)
        terminations, contention = _scale_in(box, size)
    return Bursts(launches, terminations, contention, _ask_cpu(contention.longest))


def _launch(box: Sandbox, size: int) -> Burst:
    began = time.time()
    with load.sampled() as sampled:
        box.asg.set_desired(size)
        records = wait_for(lambda: _records(box, "launch", size, began), 120 + size, "every launch record")
        first_steps = wait_for(lambda: _first_steps(box, records, began), 120 + size, "every first step")
        box.asg.wait_in_service(size, timeout=300 + size)
    end = max(first_steps.values())
    _settle_journal(box, end)
    return Burst(
        "launch",
        size,
        max(records.values()) - began,
        end - began,
        _invocations(box, began, end),
        sampled.summary(began, end),
    )


def _scale_in(box: Sandbox, size: int) -> tuple[Burst, Contention]:
    nodes = {box.kube.node_for_instance(instance) for instance in box.asg.in_state("InService")}
    box.kube.reset_history()
    box.kube.reset_counters()
    began = time.time()
    with load.sampled() as sampled:
        box.asg.set_desired(0)
        records = wait_for(
            lambda: _records(box, "terminate", size, began), 120 + size, "every terminate record"
        )
        decided = wait_for(lambda: _slot_decisions(box, nodes), 120 + size, "every slot decision")
        # The writes kept, then the writes attempted, at the same moment (the drains go on after it): a
        # write still in flight counts as attempted and not kept, a conflict too many rather than too few.
        kept = len(budget_writes(box.kube.history()))
        calls = box.kube.counters()
    end = max(decided.values())
    _settle_journal(box, end)
    attempted = calls.get(("update", "configmaps"), 0) + calls.get(("create", "configmaps"), 0)
    decisions, first, wakes = _decisions(box, began, end)
    writes = [write for write in budget_writes(box.kube.history()) if began <= write.time <= end]
    contention = Contention(
        decisions=decisions,
        seconds=end - first,
        conflicts=attempted - kept,
        configmap_requests=sum(n for (_, resource), n in calls.items() if resource == "configmaps"),
        wakes=wakes,
        freed=sum(len(a.holder_nodes() - b.holder_nodes()) for a, b in itertools.pairwise(writes)),
        longest=max(_budget_data(box), key=lambda data: len(data.get(BUDGET_KEY, ""))),
    )
    burst = Burst(
        "terminate",
        size,
        max(records.values()) - began,
        end - began,
        _invocations(box, began, end),
        sampled.summary(began, end),
    )
    return burst, contention


def _budget_data(box: Sandbox) -> list[dict[str, str]]:
    return [
        dict(entry.object.get("data") or {})
        for entry in box.kube.history()
        if entry.kind == "ConfigMap"
        and (entry.namespace, entry.name) == (BUDGET_NAMESPACE, BUDGET_NAME)
        and not entry.removed
    ]


class _Text:
    """A BudgetStore over one JSON text that it never changes (each ask starts on the same document): an
    update reads it and serializes what it would write, as the ConfigMap store does, without the API server."""

    def __init__(self, text: str) -> None:
        self._text = text

    def read(self) -> BudgetDocument:
        return BudgetDocument.from_json(self._text)

    def update[T](self, mutate: Callable[[BudgetDocument | None], tuple[BudgetDocument | None, T]]) -> T:
        written, result = mutate(self.read())
        if written is not None:
            written.to_json()
        return result


class _At:
    def __init__(self, now: datetime) -> None:
        self._now = now

    def now(self) -> datetime:
        return self._now


class _NoNodes:
    def nodes_in_scope(self) -> list[NodeState]:
        return []


class _OneConfigMap:
    """The budget's ConfigMap for the store, as the kubernetes client gives it (a V1ConfigMap, a Date), that
    every read finds as it was first: each ask starts on the same document, and a write is answered at once."""

    def __init__(self, data: dict[str, str], now: datetime) -> None:
        self._data = data
        self._date = format_datetime(now, usegmt=True)

    def read_namespaced_config_map_with_http_info(self, name: str, namespace: str, **_: Any) -> Any:
        metadata = V1ObjectMeta(name=name, namespace=namespace, resource_version="1", uid="bench")
        return V1ConfigMap(metadata=metadata, data=dict(self._data)), 200, {"Date": self._date}

    def replace_namespaced_config_map(self, name: str, namespace: str, body: Any, **_: Any) -> Any:
        return body


def _ask_cpu(data: dict[str, str], repeat: int = 30) -> AskCpu:
    """The CPU of a newcomer's ask on the budget ConfigMap's ``data`` (see the module docstring), the mean of
    ``repeat`` asks, at the time of the document's last write, by the stack that wrote it, under the burst's
    budget."""
    text = data[BUDGET_KEY]
    doc = BudgetDocument.from_json(text)
    owner, recorded = next(iter(doc.limits.items()))
    now = max((recorded.updated_at, *(e.renewed_at for e in doc.entries())))
    zone = next((e.zone for e in doc.entries()), None)
    limits, ttl = BudgetLimits(Quantity.parse(str(BUDGET))), timedelta(minutes=15)

    def service(store: Any) -> DisruptionBudget:
        return DisruptionBudget(
            store=store,
            nodes=_NoNodes(),
            clock=_At(now),
            metrics=_NoMetrics(),
            limits=limits,
            holder_ttl=ttl,
            count_unavailable=False,
            owner=owner,
        )

    budget = service(_Text(text))
    api = _OneConfigMap(data, now)
    # (its wall clock the document's: the Date tells no lead)
    stored = service(
        ConfigMapBudgetStore(lambda: api, BUDGET_NAMESPACE, BUDGET_NAME, wall_clock=now.timestamp)
    )

    def decision(request: SlotRequest) -> None:
        stored = BudgetDocument.from_json(text)
        live = rules.with_own_limits(rules.prune(stored, now), owner, stored.limits[owner])
        rules.claim(live, request, now=now, ttl=ttl, renewing=False)[0].to_json()

    def mean(ask: Callable[[SlotRequest], Any]) -> float:
        spent = 0.0
        for i in range(repeat):
            request = SlotRequest(
                node=f"newcomer-{i}",
                instance_id=f"i-new{i}",
                zone=zone,
                owner=owner,
                record_id=f"i-new{i}/terminate/bench",
                token="bench",
            )
            began = time.process_time()
            ask(request)
            spent += time.process_time() - began
        return spent / repeat

    logging.disable(logging.INFO)  # the service's line per decision: not in the table, nor in the figure
    try:
        return AskCpu(len(doc.waiters), mean(budget.acquire), mean(decision), mean(stored.acquire))
    finally:
        logging.disable(logging.NOTSET)


def _records(box: Sandbox, transition: str, size: int, since: float) -> dict[str, float] | None:
    """Lifecycle id -> when its record was written (its received_at), for the records written since
    ``since``, once there are ``size`` of them."""
    table = box.runner.table("LifecycleTable").name
    found: dict[str, float] = {}
    for page in box.runner.dynamodb.get_paginator("scan").paginate(TableName=table):
        for item in page.get("Items", []):
            record_id = item["id"]["S"]
            if "received_at" not in item:
                continue  # an action's claim, written with its lifecycle's record (not a record)
            written = datetime.fromisoformat(item["received_at"]["S"]).timestamp()
            if f"/{transition}/" in record_id and written >= since:
                found[record_id] = written
    return found if len(found) >= size else None


def _first_steps(box: Sandbox, records: dict[str, float], since: float) -> dict[str, float] | None:
    """Lifecycle id -> when the invocation that ran its first step (seq 0) ended."""
    done: dict[str, float] = {}
    for invocation in box.runner.journal.invocations(function="DrainFunction"):
        if invocation.started_at < since:
            continue
        for record in (invocation.event or {}).get("Records", []):
            message = json.loads(record["body"])
            if message.get("seq") == 0 and message["record_id"] in records:
                done.setdefault(message["record_id"], invocation.finished_at)
    return done if len(done) >= len(records) else None


def _slot_decisions(box: Sandbox, nodes: set[str | None]) -> dict[str, float] | None:
    """Node -> when it first entered the budget (holder or waiter), once every node has."""
    entered: dict[str, float] = {}
    for write in budget_writes(box.kube.history()):
        for entry in (*write.holders, *write.waiters):
            entered.setdefault(entry.node, write.time)
    return entered if all(node in entered for node in nodes) else None


def _settle_journal(box: Sandbox, end: float, quiet: float = 3.0, timeout: float = 60.0) -> None:
    """Wait until the invocations that started by ``end`` are all in the journal (it records an invocation
    when it ends): none more for ``quiet`` seconds."""
    deadline = time.monotonic() + timeout
    seen, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        count = sum(1 for invocation in box.runner.journal.invocations() if invocation.started_at <= end)
        if count != seen:
            seen, since = count, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
        time.sleep(0.2)


def _decisions(box: Sandbox, began: float, end: float) -> tuple[int, float, int]:
    """Runs of the slot step (first runs, retries, wake-ups) that started within the burst, when the first of
    them started (the budget's share of the burst begins there, after intake's), and how many of them a
    wake-up ran. Wake-ups run on the wake function."""
    count, first, wakes = 0, end, 0
    for invocation in box.runner.journal.invocations():
        if invocation.function not in ("DrainFunction", "WakeFunction"):
            continue
        if began <= invocation.started_at <= end:
            for record in (invocation.event or {}).get("Records", []):
                message = json.loads(record["body"])
                if message.get("step") == "acquire-slot":
                    count += 1
                    wakes += bool(message.get("wake"))
                    first = min(first, invocation.started_at)
    return count, first, wakes


def _invocations(box: Sandbox, began: float, end: float) -> dict[str, int]:
    counts: dict[str, int] = {}
    for invocation in box.runner.journal.invocations():
        if began <= invocation.started_at <= end:
            counts[invocation.function] = counts.get(invocation.function, 0) + 1
    return counts


def result(found: Bursts) -> Result:
    launches, terminations, contention = found.launches, found.terminations, found.contention
    n = launches.size
    per_second = contention.decisions / contention.seconds if contention.seconds else 0.0
    rows = [
        Row(f"{n} launches at once: last record written", launches.last_record, None, "s", "-"),
        Row(
            f"{n} launches at once: last first step (readiness gate)",
            launches.last_first_step,
            None,
            "s",
            "-",
        ),
        Row(f"{n} terminations at once: last record written", terminations.last_record, None, "s", "-"),
        Row(f"{n} terminations at once: last slot decision", terminations.last_first_step, None, "s", "-"),
        Row(f"budget, {n} nodes for {BUDGET} slots: slot decisions per second", per_second, None, "", "-"),
        # Each node asks once ideally; a waiter asks again at its retries (further back in line, less often)
        Row(
            f"budget, {n} nodes for {BUDGET} slots: slot asks per node vs one each",
            contention.decisions / n,
            1.0,
            "",
            "-",
        ),
        Row(
            f"budget, {n} nodes for {BUDGET} slots: 409 conflicts per decision",
            contention.conflicts / max(1, contention.decisions),
            None,
            "",
            "-",
        ),
        Row(
            f"budget: CPU per ask with {found.ask.waiters} waiters (ms), ours vs the decision alone",
            found.ask.ours * 1000,
            found.ask.decision * 1000,
            "",
            "-",
        ),
        Row(
            f"budget: CPU per ask with {found.ask.waiters} waiters (ms), the ConfigMap store vs in memory",
            found.ask.stored * 1000,
            found.ask.ours * 1000,
            "",
            "-",
        ),
    ]
    details = [
        f"a group scaled from 0 to {n} and back to 0 in one step each; hooks notify the intake queue and "
        f"EventBridge; the template's queue settings; budget {BUDGET} in all; nodes without pods",
        f"launches: invocations {launches.invocations}",
        *launches.load,
        f"terminations: invocations {terminations.invocations}; {contention.decisions} slot decisions in "
        f"{contention.seconds:.1f} s (first decision -> last node in the budget), {contention.conflicts} "
        f"conflicts (409), {contention.configmap_requests} ConfigMap requests",
        # a wake-up is owed only to a slot freed (or an expired entry removed): more than about one per slot
        # is waste, an invocation each, most of them finding their waiter gone on with its slot
        f"terminations: {contention.wakes} of the slot decisions run by a wake-up, for {contention.freed} "
        f"slots freed",
        *terminations.load,
    ]
    return Result(f"bursts of {n} lifecycle actions", rows, details)
