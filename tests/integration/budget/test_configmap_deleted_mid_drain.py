"""The drains' steps while the budget ConfigMap is deleted and not yet created again (`kubectl delete`, then the
GitOps sync or the operator that applies deploy/rbac.yaml again, seconds to a minute later).

nodecycle never creates the ConfigMap: every ask and renewal fails naming it and the fix (BudgetNotInstalled).
That failure is the ConfigMap's answer, as a refused read is (403: RBAC edited for a while), not an error for the
queue: raised as a plain error, it failed the step's message, which SQS delivered again only after the work
queue's visibility timeout (150 s by default), so every drain that polled in the window stalled that long, its
slot (seeded into the ConfigMap created again) held idle, and every waiter that asked in it too. As a refusal,
the drain's poll waits its poll interval, evicting nothing (its slot cannot be confirmed), and the engine retries
an ask in seconds, up to its refused tries (then the message fails: the alarm, as before)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import pytest
from kubernetes import client

from nodecycle.adapters.kube.budget import BudgetNotInstalled
from nodecycle.domain.budget import DisruptionBudget, SlotReason, SlotRequest
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import Step
from nodecycle.domain.ports.cluster import Refused
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE, RBAC, add_nodes, admin_api
from tests.integration.budget.recreation import (
    budget_of,
    evict_step,
    in_progress,
    lifecycle_of,
    record_of,
    six_nodes,
    slot_of,
)
from tests.integration.budget.test_configmap_recreated import request
from tests.support.fakes import InMemoryRecords
from tests.unit.budget.fakes import FakeClock
from tests.unit.drain.test_drain_steps import policy


def poll(api: client.CoreV1Api, budget: DisruptionBudget, slot: SlotRequest, now: datetime) -> Outcome:
    """A poll of node ``slot.node``'s eviction, its instance running."""
    return evict_step(api, budget, slot)(lifecycle_of(slot, Step.EVICT, seq=3), now)


def test_a_drain_polling_while_the_configmap_is_deleted_waits_a_poll_and_goes_on_once_it_is_back(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given node 0's drain in progress (slot held, node claimed), and the ConfigMap deleted
    clock, records, blue = six_nodes(server, core)
    slot = slot_of(0)
    in_progress(core, blue, records, slot)
    admin_api(server).delete_namespaced_config_map("nodecycle-budget", NAMESPACE)

    # When it polls
    clock.advance(5)
    waiting = poll(core, blue, slot, clock.now())

    # Then it waits its poll interval, evicting nothing (its slot cannot be confirmed), rather than fail its message
    assert (waiting.then, waiting.again, waiting.delay) == (None, True, policy().poll_seconds)

    # And once the ConfigMap is applied again, its next poll finds its slot (seeded from its node) and goes on
    server.apply(RBAC)
    clock.advance(waiting.delay)
    polled = poll(core, blue, slot, clock.now())
    assert (polled.then, polled.again) == (None, False)
    assert [h.node for h in blue.snapshot().holders] == [slot.node]
    assert blue.renew(replace(slot, in_progress=True)).reason is SlotReason.HELD


def test_an_ask_while_the_configmap_is_deleted_is_refused_naming_it_and_the_fix(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    add_nodes(server, 3)
    blue = budget_of(core, FakeClock(), InMemoryRecords())
    admin_api(server).delete_namespaced_config_map("nodecycle-budget", NAMESPACE)

    # (a refusal: the engine retries the step in seconds, up to its refused tries, then fails its message)
    with pytest.raises(Refused, match="nodecycle/nodecycle-budget does not exist") as refused:
        blue.acquire(replace(request(1), since=None))
    assert isinstance(refused.value, BudgetNotInstalled)
    assert "kubectl apply -f deploy/rbac.yaml" in str(refused.value)


def test_a_drain_polling_while_the_budgets_namespace_is_deleted_and_applied_again_keeps_its_slot(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given node 0's drain in progress (slot held, node claimed), node 1's waiting under a budget of 1, and the
    # budget's namespace deleted (`kubectl delete namespace`: terminating, then its ConfigMap gone with it)
    clock, records, blue = six_nodes(server, core, total="1")
    slot = slot_of(0)
    in_progress(core, blue, records, slot)
    records.create(record_of(slot_of(1), Step.ACQUIRE_SLOT, seq=1))
    assert blue.acquire(slot_of(1)).reason is SlotReason.NO_ROOM
    admin_api(server).delete_namespace(NAMESPACE)
    server.settle()
    assert admin_api(server).list_namespaced_config_map(NAMESPACE).items == []

    # When node 0's drain polls, and node 1 asks, while it is gone
    clock.advance(5)
    waiting = poll(core, blue, slot, clock.now())
    with pytest.raises(Refused):  # (the namespace's Role went with it: a 403, or the ConfigMap's 404)
        blue.acquire(slot_of(1))

    # Then the drain waits its poll interval, evicting nothing; and once the namespace and the ConfigMap are applied
    # again, its slot is seeded from its node: it goes on, and node 1 still waits (the limit of 1 holds)
    assert (waiting.then, waiting.again, waiting.delay) == (None, True, policy().poll_seconds)
    server.apply(RBAC)
    clock.advance(waiting.delay)
    polled = poll(core, blue, slot, clock.now())
    assert (polled.then, polled.again) == (None, False)
    assert blue.acquire(slot_of(1)).reason is SlotReason.NO_ROOM
    assert [h.node for h in blue.snapshot().holders] == [slot.node]
