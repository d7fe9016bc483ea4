"""A late poll of a finished drain's eviction after the budget ConfigMap was created again, whose give-back write
fails (500, 429, a storm of 409s), on the sandbox API server through the product's adapters.

Such a poll finds no holder and no mark of its lifecycle's release (both went with the ConfigMap before), so the
budget cannot vouch for the slot it would take (``unmarked``) and reads the lifecycle's record: over, the slot
goes back at once (see test_late_polls_after_recreation.py). That give-back was a second write after the write
that took the slot: when it failed, the step failed with the slot held, and the poll's redelivery found it held
and renewed lately (no longer a new slot, so no longer ``unmarked``): held idle by nobody until the sweeper
found the lifecycle over or its TTL ended, while nodes waited for it. The slot of a lifecycle over is never
taken now: its give-back is the one write, and a write that fails wrote nothing for the retry to trust."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from kubernetes import client

from nodecycle.domain.budget import SlotReason
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import Step
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import add_nodes, node_name
from tests.integration.budget.recreation import budget_of, lifecycle_of, poll, slot_of
from tests.integration.budget.recreation import record_of as lifecycle_of_ask
from tests.integration.budget.test_configmap_recreated import budget_of as recreated_budget_of
from tests.integration.budget.test_configmap_recreated import recreate_the_configmap, request
from tests.integration.budget.test_late_deliveries_after_recreation import drained_and_released, late_ask
from tests.support.fakes import InMemoryRecords
from tests.unit.budget.fakes import START, FakeClock

# What the API server answers the give-back's write: each as many times as the store's tries (8), so that a
# conflict fails the step too, not only its first try
FAULTS = {"500": "kube-error", "429": "kube-throttle", "409": "kube-conflict"}


class FailingGiveBack:
    """The drain function's client, through which the sandbox API server fails every write of the budget
    ConfigMap that marks ``record_id``'s slot given back, ``times`` times: armed on the server at the first such
    write, whichever write of the budget's that is."""

    def __init__(
        self, api: client.CoreV1Api, server: KubeServer, record_id: str, kind: str, times: int
    ) -> None:
        self._api, self._server, self._record_id = api, server, record_id
        self._kind, self._times = kind, times
        self.armed = False

    def replace_namespaced_config_map(self, name: str, namespace: str, body: Any, **kwargs: Any) -> Any:
        released = json.loads((body.data or {}).get("budget.json") or "{}").get("released", [])
        if not self.armed and any(r.get("recordId") == self._record_id for r in released):
            fault = Fault("give-back", self._kind, target="PUT configmaps", limit=self._times)
            self._server.faults.arm([fault], seed=1)
            self.armed = True
        return self._api.replace_namespaced_config_map(name, namespace, body, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._api, name)


@pytest.mark.parametrize("status", sorted(FAULTS))
def test_a_late_polls_give_back_that_fails_leaves_no_slot_to_its_redelivery(
    server: KubeServer, core: client.CoreV1Api, status: str
) -> None:
    # Given a budget of 2, node 0's drain over (its slot given back, its record done), then the ConfigMap
    # created again and node 1's drain holding a slot in it
    add_nodes(server, 6)
    clock = FakeClock()
    records = InMemoryRecords()
    slot = slot_of(0)
    drained_and_released(core, slot, clock)
    records.create(lifecycle_of(slot, Step.DONE, seq=9))
    recreate_the_configmap(server)
    clock.advance(5)
    failing = FailingGiveBack(core, server, slot.record_id, FAULTS[status], times=8)
    blue = budget_of(failing, clock, records)  # type: ignore[arg-type]  # (a CoreV1Api in all it is asked)
    assert blue.acquire(slot_of(1)).granted

    # When a late delivery of node 0's eviction poll runs, and the API server fails the write that gives its
    # slot back (every try of it): the step fails, and its message is delivered again
    with pytest.raises(TransientError):
        poll(core, blue, slot, "shutting-down", clock.now())
    assert failing.armed
    assert {f.kind for f in server.faults.firings()} == {FAULTS[status]}
    server.faults.disarm()
    clock.advance(2)
    again = poll(core, blue, slot, "shutting-down", clock.now())

    # Then the redelivery gives nothing back to node 0 either: it holds no slot, marked given back, and the
    # slot is there for node 2 (not held idle for node 0 until the sweeper or its TTL)
    assert again.again
    assert [h.node for h in blue.snapshot().holders] == [node_name(1)]
    assert blue.renew(slot).reason is SlotReason.RELEASED
    assert blue.acquire(slot_of(2)).granted


@pytest.mark.parametrize("status", sorted(FAULTS))
def test_a_late_asks_give_back_that_fails_is_given_back_by_another_late_delivery(
    server: KubeServer, core: client.CoreV1Api, status: str
) -> None:
    # Given node 0's drain over (its slot given back, its record done), then the ConfigMap created again
    add_nodes(server, 6)
    clock = FakeClock()
    slot = replace(request(0), since=START - timedelta(minutes=1))
    drained_and_released(core, slot, clock)
    records = InMemoryRecords()
    records.create(lifecycle_of_ask(slot, Step.DONE, seq=9))
    recreate_the_configmap(server)
    clock.advance(5)
    failing = FailingGiveBack(core, server, slot.record_id, FAULTS[status], times=8)
    blue = recreated_budget_of(failing, clock, "blue")  # type: ignore[arg-type]

    # When a late delivery of its first ask runs, and the API server fails the write that gives the slot it took
    # back (every try of it), then another late delivery of it runs (a duplicate)
    first = late_ask(core, blue, records, slot)
    assert failing.armed
    held = [h.node for h in blue.snapshot().holders]
    server.faults.disarm()
    again = late_ask(core, blue, records, slot)

    # Then the first waits, its failure not raised into the engine (whose retry of a step over never runs: its
    # commit loses to the record that went on, drain/acquire._give_back_late), the slot it took held;
    # and the later delivery gives the slot back: none held, the lifecycle marked given back in the new document
    assert first.again
    assert held == [slot.node]
    assert again.again
    assert blue.snapshot().holders == []
    assert blue.acquire(slot).reason is SlotReason.RELEASED


def test_a_late_poll_that_finds_no_room_after_the_configmap_is_recreated_takes_no_place_in_line(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given a budget of 1: node 0's drain over (its slot given back, its record done), then the ConfigMap created
    # again and node 1's drain holding the one slot in it
    add_nodes(server, 6)
    clock = FakeClock()
    records = InMemoryRecords()
    slot = slot_of(0)
    drained_and_released(core, slot, clock)
    records.create(lifecycle_of(slot, Step.DONE, seq=9))
    recreate_the_configmap(server)
    clock.advance(5)
    blue = budget_of(core, clock, records, total="1")
    assert blue.acquire(slot_of(1)).granted

    # When a late delivery of node 0's eviction poll runs (no room: it would wait in line, as a drain in progress
    # that lost its slot), then node 2 asks, and node 1's drain gives its slot back
    late = poll(core, blue, slot, "shutting-down", clock.now())
    records.create(
        lifecycle_of_ask(slot_of(2), Step.ACQUIRE_SLOT, seq=1)
    )  # (its first ask, begun before, reads it)
    assert blue.acquire(slot_of(2)).reason is SlotReason.NO_ROOM
    woken = blue.release(node_name(1), slot_of(1).record_id, slot_of(1).token)

    # Then node 0 took no place in line (ahead of node 2, in progress as it claimed to be), and the slot went to
    # node 2, not to a lifecycle over that would hold it idle until its place's TTL
    assert late.again
    assert blue.renew(slot).reason is SlotReason.RELEASED
    assert woken == [slot_of(2).record_id]
    assert [h.node for h in blue.snapshot().holders] == [node_name(2)]
