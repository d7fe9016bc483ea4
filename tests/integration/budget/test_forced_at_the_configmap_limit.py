"""A forced slot when the document is at the API server's 1 MiB limit for a ConfigMap and its stack has no
waiter to shed (test_document_bound.py has the stack that sheds its youngest waiters): forced holders of
another stack fill it (a scale-in longer than the actions' global timeouts, about 2,600 of them). The write
past the limit is refused by the API server (422, "Too long"), and the product neither loses the document nor
grants the slot it could not write; the refusal is a transient error the step retries, and the slot is
granted once releases have made room."""

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
    Holder,
    SlotReason,
    SlotRequest,
)
from nodecycle.domain.errors import TransientError
from nodecycle.domain.policy import Quantity
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE, admin_api
from tests.integration.budget.test_document_bound import forced_holders
from tests.support.fakes import FakeClock, FakeMetrics

NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
LIMIT = 1024 * 1024  # the API server's, for a ConfigMap's data


def forced_holders_of_green(count: int) -> tuple[Holder, ...]:
    """Green's nodes that took a slot without room, their actions' global timeouts near."""
    return forced_holders(count, owner="nodes-green")


def stored(server: KubeServer) -> Any:
    response: Any = admin_api(server).read_namespaced_config_map(
        "nodecycle-budget", NAMESPACE, _preload_content=False
    )
    return json.loads(response.data)


def budget(core: client.CoreV1Api, owner: str) -> DisruptionBudget:
    return DisruptionBudget(
        store=ConfigMapBudgetStore(lambda: core, NAMESPACE, sleep=lambda seconds: None),
        nodes=KubeNodeInventory(lambda: core),
        clock=FakeClock(NOW),
        metrics=FakeMetrics(),
        limits=BudgetLimits(Quantity(value=1)),
        holder_ttl=timedelta(minutes=10),
        count_unavailable=False,
        owner=owner,
    )


def test_a_forced_slot_past_the_configmap_limit_with_nothing_to_shed_is_refused_and_granted_once_there_is_room(
    core: client.CoreV1Api, server: KubeServer
) -> None:
    # Given a document of green's forced holders, a few hundred bytes under the API server's 1 MiB
    size, count, many = len(BudgetDocument().to_json()), 0, forced_holders_of_green(3000)
    while size + BudgetDocument.entry_bytes(many[count]) <= LIMIT - 300:
        size += BudgetDocument.entry_bytes(many[count])
        count += 1
    full = BudgetDocument(holders=many[:count])
    assert LIMIT - 800 < len(full.to_json()) <= LIMIT - 300
    ConfigMapBudgetStore(lambda: core, NAMESPACE).update(lambda doc: (full, None))
    before = stored(server)["metadata"]["resourceVersion"]

    # When blue's node, which has no place in line, must go (its action's global timeout is too near to wait)
    late = SlotRequest(
        "ip-10-9-200-1.eu-west-1.compute.internal",
        "i-0fedcba9876543210",
        "eu-west-1c",
        "nodes-blue",
        "i-0fedcba9876543210/terminate/0b6f2d4e-3a1c-4e8b-9d7f-5a2c4e6b8d0f",
        token="0b6f2d4e-3a1c-4e8b-9d7f-5a2c4e6b8d0f",
        force=True,
    )
    blue = budget(core, "nodes-blue")

    # Then the write the API server refuses is a transient error naming it (the step retries), nothing was written,
    # and the document is there whole
    with pytest.raises(TransientError, match=r"refused ConfigMap nodecycle/nodecycle-budget .*Too long"):
        blue.acquire(late)
    after = stored(server)
    assert after["metadata"]["resourceVersion"] == before
    doc = BudgetDocument.from_json(after["data"]["budget.json"])
    assert len(doc.holders) == count
    assert doc.holder(late.node) is None

    # and once three of green's drains gave their slots back, its retry takes the forced slot under the limit
    green = budget(core, "nodes-green")
    for holder in full.holders[:3]:
        green.release(holder.node, holder.record_id, holder.token)
    decision = blue.acquire(late)
    assert (decision.granted, decision.reason) == (True, SlotReason.FORCED)
    text = stored(server)["data"]["budget.json"]
    assert len(text.encode()) <= LIMIT
    assert BudgetDocument.from_json(text).holder(late.node) is not None
