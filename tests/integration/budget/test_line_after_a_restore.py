"""The waiters' line, and the marks of slots given back, after the budget's document was put back from a snapshot.

A snapshot put back loses what the budget wrote since it was taken: the places in line of the waiters that joined
since, the marks of the slots given back since. A ConfigMap created again loses them too, and the budget tells by
its creation: a waiter that began to wait before it takes its place back (first come, first served), and a slot
asked for by a lifecycle that began before it is judged on the lifecycle's record (see
test_line_after_recreation.py, test_late_deliveries_after_recreation.py). A snapshot written back into the
ConfigMap as it is (``kubectl replace`` or ``apply`` of a saved manifest, a GitOps tool's sync of an old revision)
keeps the old creation: the waiters that joined since the snapshot joined the line again as newcomers, behind the
nodes that asked first after it. On the sandbox API server, through the product's adapters."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from kubernetes import client

from nodecycle.adapters.kube.budget import ConfigMapBudgetStore, KubeDrainsInProgress, KubeNodeInventory
from nodecycle.domain.budget import BudgetLimits, DisruptionBudget, SlotReason
from nodecycle.domain.policy import Quantity
from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.kube import api as sandbox_api
from nodecycle_sandbox.kube import store as sandbox_store
from tests.integration.budget.conftest import NAMESPACE, add_nodes, admin_api, core_api, node_name
from tests.integration.budget.drains import SharedMetrics
from tests.integration.budget.test_budget_restored_document import NAME, backup, restore
from tests.integration.budget.test_configmap_recreated import TTL, cordon, request
from tests.unit.budget.fakes import FakeClock


def on_the_api_servers_clock(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sandbox API server's clock (its objects' stamps, managedFields' times, its answers' Date) as ``clock``,
    which the budget's lifecycles are stamped by: the two run together, as a real API server's and a function's do."""
    ticking = SimpleNamespace(time=lambda: clock.now().timestamp())
    monkeypatch.setattr(sandbox_api, "time", ticking)
    monkeypatch.setattr(sandbox_store, "time", ticking)


def budget_of(api: client.CoreV1Api, clock: FakeClock) -> DisruptionBudget:
    """Stack blue's budget of one slot as the drain function wires it, its store on the same clock as the budget."""
    return DisruptionBudget(
        store=ConfigMapBudgetStore(
            lambda: api, NAMESPACE, sleep=lambda _: None, wall_clock=lambda: clock.now().timestamp()
        ),
        nodes=KubeNodeInventory(lambda: api, with_status=False),
        clock=clock,
        metrics=SharedMetrics(),
        limits=BudgetLimits(Quantity.parse("1"), Quantity.parse("1")),
        holder_ttl=TTL,
        count_unavailable=False,
        owner="blue",
        drains=KubeDrainsInProgress(lambda: api),
    )


def put_back(server: KubeServer, saved: client.V1ConfigMap, how: str) -> None:
    """``saved`` put back: created again from it (Velero), or its data written back into the ConfigMap as it is
    (``kubectl replace`` of the saved manifest)."""
    if how == "created again":
        restore(server, saved)
        return
    current = backup(server)
    current.data = saved.data
    admin_api(server).replace_namespaced_config_map(NAME, NAMESPACE, current)


@pytest.mark.parametrize("how", ["created again", "written back"])
def test_a_waiter_that_joined_after_the_snapshot_goes_before_the_nodes_that_asked_after_it_was_put_back(
    server: KubeServer, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    # Given a budget of one slot, node 0's drain in progress in it, a snapshot of the ConfigMap, then node 1 in
    # line for a minute
    add_nodes(server, 6)
    api = core_api(server)
    clock = FakeClock(datetime.now(UTC))
    on_the_api_servers_clock(clock, monkeypatch)
    blue = budget_of(api, clock)
    began = clock.now() - timedelta(seconds=30)
    holder = replace(request(0), since=began)
    assert blue.acquire(holder).granted
    cordon(api, holder)
    saved = backup(server)
    clock.advance(60)
    old = replace(request(1), since=began)
    assert blue.acquire(old).reason is SlotReason.NO_ROOM
    joined = clock.now()

    # When the snapshot is put back, node 2 asks for the first time, then node 1 asks again (waiting since it joined)
    clock.advance(60)
    put_back(server, saved, how)
    clock.advance(1)
    assert blue.acquire(replace(request(2), since=clock.now())).reason is SlotReason.NO_ROOM
    clock.advance(10)
    assert blue.acquire(replace(old, waiting_since=joined)).reason is SlotReason.NO_ROOM

    # Then node 0's release passes the slot to node 1, first come: not to node 2, which came after it
    clock.advance(30)
    woken = blue.release(holder.node, holder.record_id, holder.token)
    assert woken == [old.record_id]
    assert [h.node for h in blue.snapshot().holders] == [node_name(1)]
    api.api_client.close()


def test_a_late_ask_of_a_lifecycle_that_gave_its_slot_back_after_the_snapshot_is_judged_on_its_record(
    server: KubeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a budget whose document was saved two minutes after its ConfigMap's creation, then node 0's lifecycle
    # begun, granted its slot, and given it back (the mark that refuses its late deliveries written since the save)
    add_nodes(server, 6)
    api = core_api(server)
    clock = FakeClock(datetime.now(UTC))
    on_the_api_servers_clock(clock, monkeypatch)
    blue = budget_of(api, clock)
    clock.advance(100)
    first = replace(request(5), since=clock.now())
    assert blue.acquire(first).granted
    blue.release(first.node, first.record_id, first.token)
    clock.advance(10)
    saved = backup(server)
    clock.advance(10)
    late = replace(request(0), since=clock.now())
    assert blue.acquire(late).granted
    clock.advance(60)
    blue.release(late.node, late.record_id, late.token)
    assert blue.acquire(late).reason is SlotReason.RELEASED

    # When the snapshot is written back into the ConfigMap, and a late delivery of node 0's first ask runs
    clock.advance(60)
    put_back(server, saved, "written back")
    clock.advance(10)
    decision = blue.acquire(late)

    # Then its slot is one the budget cannot vouch for (the mark went with the snapshot): its step reads the record,
    # and gives it back for a lifecycle over (see AcquireSlot), rather than hold it idle until its TTL
    assert (decision.granted, decision.unmarked) == (True, True)
    api.api_client.close()


def test_a_waiter_goes_before_the_nodes_that_asked_after_the_document_was_removed_by_hand(
    server: KubeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a budget of one slot, node 0's drain in progress in it, and node 1 in line for a minute
    add_nodes(server, 6)
    api = core_api(server)
    clock = FakeClock(datetime.now(UTC))
    on_the_api_servers_clock(clock, monkeypatch)
    blue = budget_of(api, clock)
    began = clock.now() - timedelta(seconds=30)
    holder = replace(request(0), since=began)
    assert blue.acquire(holder).granted
    cordon(api, holder)
    clock.advance(60)
    old = replace(request(1), since=began)
    assert blue.acquire(old).reason is SlotReason.NO_ROOM
    joined = clock.now()

    # When its document is removed from the ConfigMap (`kubectl edit`, as an unreadable document's error says to),
    # node 2 asks for the first time, then node 1 asks again (waiting since it joined)
    clock.advance(60)
    admin_api(server).patch_namespaced_config_map(NAME, NAMESPACE, {"data": {"budget.json": None}})
    clock.advance(1)
    assert blue.acquire(replace(request(2), since=clock.now())).reason is SlotReason.NO_ROOM
    clock.advance(10)
    assert blue.acquire(replace(old, waiting_since=joined)).reason is SlotReason.NO_ROOM

    # Then node 0's release passes the slot to node 1, first come
    clock.advance(30)
    assert blue.release(holder.node, holder.record_id, holder.token) == [old.record_id]
    api.api_client.close()
