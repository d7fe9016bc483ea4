"""Benchmark 4: many drains asking the budget for a slot at the same instant.

``acquirers`` nodes over 3 zones each take nodecycle's real budget code (ConfigMap store, read-modify-replace
with resourceVersion) through their own client connection, as separate Lambda containers would, against the
sandbox API server. Ours: all at once, released by a barrier. Baseline: the same acquires one after another on a
fresh server, where nothing conflicts. Conflicts (HTTP 409) are counted by the server: write requests minus the
writes its history kept.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from kubernetes import client

from benchmarks.records import BUDGET_KEY, BUDGET_NAME, BUDGET_NAMESPACE, budget_writes
from benchmarks.report import Result, Row
from benchmarks.schedule import Budget
from nodecycle.adapters.kube.budget import ConfigMapBudgetStore, KubeNodeInventory
from nodecycle.domain.budget import BudgetLimits, DisruptionBudget, SlotRequest
from nodecycle.domain.errors import TransientError
from nodecycle.domain.policy import Quantity
from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.kube.access import AccessEntry

ZONES = ("eu-west-1a", "eu-west-1b", "eu-west-1c")


@dataclass(frozen=True)
class Race:
    seconds: float
    granted: int
    waiting: int
    holders_per_zone: dict[str, int]
    requests: int  # ConfigMap requests (get, create, update)
    conflicts: int  # writes answered 409
    give_ups: int  # acquires that ran out of conflict retries (TransientError) and were asked again


class _WallClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class _NoMetrics:
    """The figures come from the server, not from nodecycle's metrics."""

    def count(self, name: str, value: float = 1, **dimensions: str) -> None:
        pass

    def seconds(self, name: str, value: float, **dimensions: str) -> None:
        pass


def run(acquirers: int, budget: Budget) -> tuple[Race, Race]:
    return _race(acquirers, budget, at_once=True), _race(acquirers, budget, at_once=False)


def _race(acquirers: int, budget: Budget, *, at_once: bool) -> Race:
    with KubeServer(tls=True) as server:
        # The cluster as deployed, and the acquirers acting as the drain function (its RBAC)
        server.apply(ROOT / "deploy" / "rbac.yaml")
        server.add_access_entries([AccessEntry(DRAIN_ROLE, ("nodecycle-drain",))])
        server.map_role(DRAIN_KEY, DRAIN_ROLE, "nodecycle-DrainFunction")
        server.reset_history()  # the shipped ConfigMap is not a write of the race
        for i in range(acquirers):
            server.add_node(_node(i), instance_id=f"i-{i:017x}", zone=ZONES[i % 3])
        apis = [client.CoreV1Api(server.api_client(DRAIN_KEY)) for _ in range(acquirers)]
        budgets = [_budget(api, budget) for api in apis]
        give_ups = [0] * acquirers
        start = threading.Barrier(acquirers) if at_once else None

        def acquire(i: int) -> bool:
            request = SlotRequest(
                node=_node(i), instance_id=f"i-{i:017x}", zone=ZONES[i % 3], owner="bench", record_id=f"r-{i}"
            )
            if start is not None:
                start.wait()
            while True:  # as the step engine would: a TransientError means "try this step again"
                try:
                    return budgets[i].acquire(request).granted
                except TransientError:
                    give_ups[i] += 1

        began = time.monotonic()
        with ThreadPoolExecutor(acquirers if at_once else 1) as pool:
            granted = sum(pool.map(acquire, range(acquirers)))
        seconds = time.monotonic() - began
        for api in apis:
            api.api_client.close()
        configmap = server.get_object("configmaps", BUDGET_NAME, BUDGET_NAMESPACE)
        assert configmap is not None
        doc = json.loads(configmap["data"][BUDGET_KEY])
        calls = server.counters()
        requests = sum(n for (_, resource), n in calls.items() if resource == "configmaps")
        writes = calls.get(("create", "configmaps"), 0) + calls.get(("update", "configmaps"), 0)
        return Race(
            seconds=seconds,
            granted=granted,
            waiting=len(doc["waiters"]),
            holders_per_zone=dict(Counter(holder["zone"] for holder in doc["holders"])),
            requests=requests,
            conflicts=writes - len(budget_writes(server.history())),
            give_ups=sum(give_ups),
        )


ROOT = Path(__file__).resolve().parents[1]
DRAIN_ROLE = "arn:aws:iam::123456789012:role/nodecycle-DrainFunctionRole"
DRAIN_KEY = "AKIABENCHDRAINROLE00"


def _node(i: int) -> str:
    return f"ip-10-0-{i % 3 + 1}-{10 + i // 3}.eu-west-1.compute.internal"


def _budget(api: client.CoreV1Api, budget: Budget) -> DisruptionBudget:
    def factory() -> client.CoreV1Api:
        return api

    return DisruptionBudget(
        store=ConfigMapBudgetStore(factory, BUDGET_NAMESPACE),
        nodes=KubeNodeInventory(factory),
        clock=_WallClock(),
        metrics=_NoMetrics(),
        limits=BudgetLimits(Quantity.parse(str(budget.total)), Quantity.parse(str(budget.per_zone))),
        holder_ttl=timedelta(seconds=300),
        count_unavailable=False,
        owner="bench",
    )


def result(races: tuple[Race, Race], acquirers: int, budget: Budget) -> Result:
    at_once, serial = races
    correct = at_once.granted == budget.total and max(at_once.holders_per_zone.values()) <= budget.per_zone
    rows = [
        Row(f"budget: {acquirers} acquirers at once, wall time", at_once.seconds, serial.seconds, "s", "-"),
        Row(
            "budget: 409 conflicts per acquire",
            at_once.conflicts / acquirers,
            serial.conflicts / acquirers,
            "",
            "-",
        ),
        Row(
            "budget: ConfigMap requests per acquire",
            at_once.requests / acquirers,
            serial.requests / acquirers,
            "",
            "-",
        ),
        Row("budget: slots granted (limits held)", at_once.granted, budget.total, "", "= limits", correct),
    ]
    details = [
        f"{acquirers} acquirers over 3 zones, limits {budget.total} in all, {budget.per_zone} per zone, each "
        f"with its own client; baseline: the same acquires one after another",
        f"at once: {at_once.seconds:.2f} s, {at_once.granted} granted {at_once.holders_per_zone}, "
        f"{at_once.waiting} waiting, {at_once.conflicts} conflicts (409), {at_once.give_ups} acquires gave up "
        f"after the store's retries and were asked again, {at_once.requests} ConfigMap requests",
        f"one after another: {serial.seconds:.2f} s, {serial.granted} granted, {serial.conflicts} conflicts, "
        f"{serial.requests} ConfigMap requests",
    ]
    return Result("budget contention", rows, details)
