"""The budget document stays under the API server's 1 MiB limit for a ConfigMap: its queue is bounded, a node
that finds it full waits outside it (with a metric and a clear log line), and a write the server refuses
anyway is a clear, retried error, never a silent loss."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client

from nodecycle.adapters.kube.budget import ConfigMapBudgetStore, KubeNodeInventory
from nodecycle.domain.budget import (
    BudgetDocument,
    BudgetLimits,
    DisruptionBudget,
    SlotReason,
    SlotRequest,
    Waiter,
)
from nodecycle.domain.budget.rules import MAX_WAITERS
from nodecycle.domain.errors import TransientError
from nodecycle.domain.policy import Quantity
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE, admin_api
from tests.support.fakes import FakeClock, FakeMetrics

NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


def waiters(count: int) -> tuple[Waiter, ...]:
    """Realistic entries: EKS node names, instance ids, record ids with UUID tokens."""
    return tuple(
        Waiter(
            node=f"ip-10-{i // 62500}-{i // 250 % 250}-{i % 250}.eu-west-1.compute.internal",
            instance_id=f"i-0{i:016x}",
            zone=("eu-west-1a", "eu-west-1b", "eu-west-1c")[i % 3],
            owner="nodes-general",
            record_id=f"i-0{i:016x}/terminate/8e3c2a1f-5b7d-4c9e-a1b2-{i:012x}",
            waiting_since=NOW,
            renewed_at=NOW,
            ttl_seconds=600,
        )
        for i in range(count)
    )


def stored(server: KubeServer) -> Any:
    """The ConfigMap as the API server has it (raw JSON), read by the administrator's official client."""
    response: Any = admin_api(server).read_namespaced_config_map(
        "nodecycle-budget", NAMESPACE, _preload_content=False
    )
    return json.loads(response.data)


def budget(core: client.CoreV1Api, clock: FakeClock, metrics: FakeMetrics) -> DisruptionBudget:
    return DisruptionBudget(
        store=ConfigMapBudgetStore(lambda: core, NAMESPACE, sleep=lambda seconds: None),
        nodes=KubeNodeInventory(lambda: core),
        clock=clock,
        metrics=metrics,
        limits=BudgetLimits(Quantity(value=1)),
        holder_ttl=timedelta(minutes=10),
        count_unavailable=False,
        owner="nodes-general",
    )


def test_a_full_queue_leaves_a_newcomer_outside_and_writes_nothing(
    core: client.CoreV1Api, server: KubeServer
) -> None:
    # Given a budget whose one slot is held and whose queue holds its maximum of waiters
    clock, metrics = FakeClock(NOW), FakeMetrics()
    shared = budget(core, clock, metrics)
    assert shared.acquire(SlotRequest("held", "i-held", "eu-west-1a", "nodes-general", "rec-held")).granted
    store = ConfigMapBudgetStore(lambda: core, NAMESPACE)
    store.update(
        lambda doc: ((doc or BudgetDocument()).model_copy(update={"waiters": waiters(MAX_WAITERS)}), None)
    )
    text = stored(server)["data"]["budget.json"]
    assert len(text) < 1024 * 1024 * 0.7  # the bound keeps it well under the API server's limit
    version = stored(server)["metadata"]["resourceVersion"]

    # When one more node asks for a slot
    decision = shared.acquire(SlotRequest("late", "i-late", "eu-west-1b", "nodes-general", "rec-late"))

    # Then it is told the queue is full, counted, and nothing was written
    assert (decision.granted, decision.reason) == (False, SlotReason.QUEUE_FULL)
    assert metrics.counts["BudgetQueueFull"] == 1
    assert stored(server)["metadata"]["resourceVersion"] == version


def test_a_document_the_api_server_refuses_is_a_clear_transient_error(core: client.CoreV1Api) -> None:
    # Given a document over the API server's 1 MiB limit (no version of nodecycle writes one: a hand edit,
    # or a bug)
    oversized = BudgetDocument(waiters=waiters(4000))
    assert len(oversized.to_json()) > 1024 * 1024
    store = ConfigMapBudgetStore(lambda: core, NAMESPACE)

    # When it is written, Then the server's refusal (422) is raised as a transient error naming the size
    with pytest.raises(
        TransientError, match=rf"refused ConfigMap {NAMESPACE}/nodecycle-budget \(\d+ bytes\).*Too long"
    ):
        store.update(lambda doc: (oversized, None))
