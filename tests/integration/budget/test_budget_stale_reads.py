"""Reads the API server may serve stale, and the budget's decisions: the budget ConfigMap's read is a quorum read
(no resourceVersion named), never the watch cache's, which may lag the last grant by seconds under load; and a
paged list whose continue token etcd compacted away meanwhile (410 Expired) is not taken for the nodes there are."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from nodecycle.adapters.kube import lists
from nodecycle.domain.budget import SlotReason
from nodecycle.domain.errors import TransientError
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import add_nodes, admin_api, node_name
from tests.integration.budget.test_configmap_recreated import (
    budget_of,
    cordon,
    recreate_the_configmap,
    request,
)
from tests.unit.budget.fakes import FakeClock


def test_a_grant_is_never_decided_on_the_watch_cache_s_view_of_the_budget(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given a budget of 1, and the ConfigMaps' watch cache lagging from before node 0's grant
    add_nodes(server, 6)
    clock = FakeClock()
    with server.lagging_watch_cache("configmaps"):
        assert budget_of(core, clock, "blue", "1", "1").acquire(request(0)).granted
        # When another stack's node asks
        green = budget_of(core, clock, "green", "1", "1").acquire(request(1, owner="green"))
    # Then it sees node 0's slot, and waits
    assert (green.granted, green.reason) == (False, SlotReason.NO_ROOM)


class CompactedBetweenPages:
    """The drain function's client, whose nodes' list has etcd compact its history after its first page: the
    next page's continue token is too old (410 Expired), as when kube-apiserver's 5-minute compaction falls within
    a list of thousands of nodes."""

    def __init__(self, api: client.CoreV1Api, server: KubeServer) -> None:
        self._api, self._server = api, server
        self.pages = 0

    def list_node(self, **kwargs: Any) -> Any:
        if kwargs.get("_continue"):
            # (a write since the first page, then the compaction up to it: the first page's revision is gone)
            admin = admin_api(self._server)
            admin.patch_node(node_name(1), {"metadata": {"labels": {"example.com/touched": "yes"}}})
            admin.api_client.close()
            self._server.compact()
        self.pages += 1
        return self._api.list_node(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._api, name)


def test_a_seed_whose_node_list_expired_mid_way_writes_nothing_and_the_next_ask_seeds_all_of_them(
    server: KubeServer, core: client.CoreV1Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a budget of 1 held by node 5's drain (claimed on its node), the ConfigMap created again empty, and the
    # nodes listed 2 a page (the last one's drain on the list's last page)
    add_nodes(server, 6)
    clock = FakeClock()
    assert budget_of(core, clock, "blue", "1", "1").acquire(request(5)).granted
    cordon(core, request(5))
    recreate_the_configmap(server)
    monkeypatch.setattr(lists, "PAGE", 2)
    compacting = CompactedBetweenPages(core, server)

    # When node 0 asks, and etcd compacts its history between the seed list's pages
    with pytest.raises(TransientError, match="410"):
        budget_of(compacting, clock, "blue", "1", "1").acquire(request(0))  # type: ignore[arg-type]

    # Then the ask fails (its step retried) with the budget unwritten, not seeded from the first page alone; and
    # the next ask lists the nodes again from the start, and finds node 5's drain
    assert compacting.pages == 2
    again = budget_of(core, clock, "blue", "1", "1")
    assert again.acquire(request(0)).reason is SlotReason.NO_ROOM
    assert [h.node for h in again.snapshot().holders] == [node_name(5)]
