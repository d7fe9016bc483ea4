"""A budget ConfigMap whose ``budget.json`` this version cannot read: ``kubectl edit`` with a typo, a GitOps tool or a
backup restoring a document of another format, a field no version writes. On the sandbox API server, through the
product's adapters and the drain's steps.

Such a document is never rewritten (it may be another stack's newer format, or a person's edit to look at), and no
decision is made on it: every read of it failed with ``BudgetFormatError``, a ``ValueError`` that no step decides
on, so each ask, poll or release failed its message, delivered again after the queue's visibility timeout and
failing again (the drains' polls among them, their slots unrenewed), until the dead-letter queue. The store now
answers it as the API server's refusal of the ConfigMap (``Refused``, naming it and what to do), as a missing one
is: a drain's poll evicts nothing and says why on the node, an ask is retried up to its refused tries, then fails
its message (the alarm)."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from nodecycle.domain.ports.cluster import Refused
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE, add_nodes, admin_api
from tests.integration.budget.recreation import budget_of, poll, slot_of
from tests.support.fakes import InMemoryRecords
from tests.unit.budget.fakes import FakeClock

GOOD = {"formatVersion": 3, "holders": [], "waiters": [], "released": [], "limits": {}}
UNREADABLE = {
    "typo": json.dumps(GOOD)[:-1],  # a brace lost in an edit
    "newer-format": json.dumps({**GOOD, "formatVersion": 99}),
    "no-format": json.dumps({key: value for key, value in GOOD.items() if key != "formatVersion"}),
    "unknown-field": json.dumps({**GOOD, "holdrs": []}),
    "not-an-object": "[]",
    "bad-entry": json.dumps({**GOOD, "holders": [{"node": "n1"}]}),
}


def edit(server: KubeServer, text: str) -> None:
    """An operator's ``kubectl edit`` of the budget ConfigMap's document."""
    server.replace_config_map_data(NAMESPACE, "nodecycle-budget", {"budget.json": text})


def stored(server: KubeServer) -> str:
    config_map = admin_api(server).read_namespaced_config_map("nodecycle-budget", NAMESPACE)
    return str((config_map.data or {})["budget.json"])


@pytest.mark.parametrize("case", sorted(UNREADABLE))
def test_an_unreadable_document_refuses_every_decision_and_is_left_as_it_is(
    server: KubeServer, core: client.CoreV1Api, case: str
) -> None:
    # Given the budget's document edited into one this version cannot read
    add_nodes(server, 3)
    clock = FakeClock()
    blue = budget_of(core, clock, InMemoryRecords())
    edit(server, UNREADABLE[case])

    # When a node asks for a slot, and a drain in progress polls
    with pytest.raises(Refused) as refused:
        blue.acquire(slot_of(1))
    slot = slot_of(0)
    polled = poll(core, blue, slot, "running", clock.now())

    # Then the ask is refused, naming the ConfigMap and the way out; the poll waits, evicting nothing, and tells
    # why (as for any read refused); the document is left as it was
    message = str(refused.value)
    assert f"{NAMESPACE}/nodecycle-budget" in message
    assert "budget.json" in message
    assert (polled.again, polled.then) == (True, None)
    assert stored(server) == UNREADABLE[case]
