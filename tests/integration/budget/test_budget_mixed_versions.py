"""Two stacks sharing the budget while one of them still runs a version that predates the note (``budget.written``,
see adapters/kube/budget.py): a mixed-version period, an upgrade rolled out stack by stack. The older stack writes
the document keeping the ConfigMap's other keys as they are, the note among them, which then names a digest that is
not its document's. The newer stack took every such document for one restored or re-applied, and seeded it: every
one of its decisions after an older stack's write listed every node of the cluster (issue 11: a consistent list of
every node's metadata, 5,000 nodes' at 20 MB, where a decision is two requests of a few KB). The API server tells
that a stack set the document (managedFields: the nodecycle manager, the older stack's User-Agent, owns it, and the
note is still the one the newer stack set), so it is the budget's own, and nothing is listed. On the sandbox API
server, through the product's adapters."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from kubernetes import client

from nodecycle.adapters.kube import budget as kube_budget
from nodecycle.domain.budget import BudgetDocument, SlotReason
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE, add_nodes, admin_api, core_api, node_name
from tests.integration.budget.test_budget_restored_document import NAME
from tests.integration.budget.test_configmap_recreated import budget_of, cordon, request
from tests.unit.budget.fakes import FakeClock

OLDER_USER_AGENT = (
    "nodecycle/0.0.9"  # how the older stack's client names itself (its writes' manager: nodecycle)
)


class OlderClient:
    """The older stack's client: its writes name no fieldManager (the API server records them under its
    User-Agent's name)."""

    def __init__(self, api: client.CoreV1Api) -> None:
        self.api_client = api.api_client
        self._api = api

    def __getattr__(self, name: str) -> Any:
        return getattr(self._api, name)

    def replace_namespaced_config_map(
        self, *args: Any, field_manager: str | None = None, **options: Any
    ) -> Any:
        return self._api.replace_namespaced_config_map(*args, **options)


@contextmanager
def older_version(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The ConfigMap store as the version before the note wrote and read it: the document put in the data as read,
    every other key kept; a document read taken as written there. (Its steps are this version's otherwise.)"""

    def with_document(config_map: Any, text: str, *_: Any) -> dict[str, str]:
        return {**(config_map.data or {}), kube_budget.DATA_KEY: text}

    def document(config_map: Any, *_: Any) -> BudgetDocument:
        text = (config_map.data or {}).get(kube_budget.DATA_KEY)
        return BudgetDocument.from_json(text) if text else BudgetDocument(unwritten=True)

    with monkeypatch.context() as patched:
        patched.setattr(kube_budget, "_with_document", with_document)
        patched.setattr(kube_budget, "_document", document)
        yield


def test_the_writes_of_an_older_stack_sharing_the_budget_have_no_decision_of_the_newer_one_list_the_nodes(
    server: KubeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a budget of 2 per stack shared by blue (this version) and green (the version before the note), blue's
    # drain in progress on node 0
    add_nodes(server, 9)
    api = core_api(server)
    older = core_api(server)
    older.api_client.user_agent = OLDER_USER_AGENT
    clock = FakeClock(datetime.now(UTC))
    blue = budget_of(api, clock, "blue")
    green = budget_of(cast("client.CoreV1Api", OlderClient(older)), clock, "green")
    assert blue.acquire(request(0)).granted
    cordon(api, request(0))

    # When the two stacks' decisions alternate, green's writes keeping blue's note as it was
    server.reset_counters()
    for i in (1, 2, 3):
        clock.advance(5)
        with older_version(monkeypatch):
            assert green.acquire(request(i + 3, "green")).reason in (SlotReason.GRANTED, SlotReason.NO_ROOM)
        clock.advance(5)
        assert blue.renew(request(0)).reason is SlotReason.HELD
        assert blue.acquire(request(i)).reason in (SlotReason.GRANTED, SlotReason.NO_ROOM)

    # Then no decision of blue's listed the nodes: green's writes are a stack's, not a restore
    assert server.counters().get(("list", "nodes"), 0) == 0
    # and the document is the one both stacks wrote: blue's drain and green's first node hold the 2 slots, the others
    # wait
    view = blue.snapshot()
    assert [(h.owner, h.node) for h in view.holders] == [("blue", node_name(0)), ("green", node_name(4))]
    assert {w.node for w in view.waiters} == {node_name(i) for i in (1, 2, 3, 5, 6)}
    older.api_client.close()
    api.api_client.close()


def test_a_snapshot_applied_again_then_written_over_by_an_older_stack_is_still_seeded(
    server: KubeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a budget of 2 shared by blue (this version) and green (the version before the note), saved whole when
    # blue's node 3 had just given its slot back, and blue's two drains in progress on nodes 0 and 1, granted since
    add_nodes(server, 9)
    api = core_api(server)
    older = core_api(server)
    older.api_client.user_agent = OLDER_USER_AGENT
    clock = FakeClock(datetime.now(UTC))
    blue = budget_of(api, clock, "blue")
    green = budget_of(cast("client.CoreV1Api", OlderClient(older)), clock, "green")
    assert blue.acquire(request(3)).granted
    blue.release(node_name(3), request(3).record_id, request(3).token)
    saved = dict(admin_api(server).read_namespaced_config_map(NAME, NAMESPACE).data or {})
    for i in (0, 1):
        clock.advance(5)
        assert blue.acquire(request(i)).granted
        cordon(api, request(i))

    # When that snapshot is applied again (its document and its note), and green writes over it before blue reads
    # it (green cannot tell: its grant goes past the limit)
    admin_api(server).patch_namespaced_config_map(NAME, NAMESPACE, {"data": saved})
    clock.advance(5)
    with older_version(monkeypatch):
        assert green.acquire(request(6, "green")).granted

    # Then blue still counts its drains in progress from their nodes: the note is the snapshot's, set by another
    third = blue.acquire(request(2))
    assert (third.granted, third.reason) == (False, SlotReason.NO_ROOM)
    assert {h.node for h in blue.snapshot().holders} == {node_name(0), node_name(1), node_name(6)}
    older.api_client.close()
    api.api_client.close()
