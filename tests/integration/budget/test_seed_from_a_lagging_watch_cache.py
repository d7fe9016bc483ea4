"""The seed of a budget document created again (see nodecycle.domain.budget.seed) lists the drains in progress
from the nodes' annotations. A list with resourceVersion=0 is served from kube-apiserver's watch cache, which
may lag behind etcd (by milliseconds, or seconds under load): a drain that claimed its node just before the
ConfigMap was deleted could be missing from it, and left out of the seed its slot would be granted again while
it evicts (invariant 1). The sandbox's lagging_watch_cache holds the nodes' cache at its state before the claim."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from nodecycle.adapters.kube.budget import KubeDrainsInProgress
from nodecycle.domain.budget import SlotReason
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import add_nodes, admin_api, node_name
from tests.integration.budget.test_configmap_recreated import (
    budget_of,
    cordon,
    polled,
    recreate_the_configmap,
    request,
)
from tests.unit.budget.fakes import FakeClock


def test_a_drain_the_watch_cache_does_not_show_yet_is_seeded_all_the_same(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given a budget of 1, node 0's drain granted its slot, and the nodes' watch cache lagging behind etcd
    add_nodes(server, 6)
    clock = FakeClock()
    blue = budget_of(core, clock, "blue", total="1", per_zone="1")
    assert blue.acquire(request(0)).granted
    with server.lagging_watch_cache("nodes"):
        # ...from before node 0's claim (cordon and annotations), and its first poll renewed the slot: it evicts
        cordon(core, request(0))
        assert blue.renew(polled(0)).reason is SlotReason.HELD
        admin = admin_api(server)
        listed: Any = admin.list_node(resource_version="0", _preload_content=False)  # (the raw answer)
        cached = json.loads(listed.data)["items"]
        admin.api_client.close()
        # (the cache lags: node 0 is not cordoned there yet)
        assert [n["spec"].get("unschedulable") for n in cached if n["metadata"]["name"] == node_name(0)] == [
            None
        ]

        # When the ConfigMap is deleted and created again empty, and node 1 asks first, its write seeding the
        # document from the nodes
        recreate_the_configmap(server)
        clock.advance(5)
        second = blue.acquire(request(1))

    # Then node 0's drain is among the seeded holders, and node 1 waits for it
    assert (second.granted, second.reason) == (False, SlotReason.NO_ROOM)
    assert [h.node for h in blue.snapshot().holders] == [node_name(0)]


def test_the_drains_in_progress_are_read_as_the_nodes_are_now(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    add_nodes(server, 3)
    with server.lagging_watch_cache("nodes"):
        cordon(core, request(1))
        drains = KubeDrainsInProgress(lambda: core).drains_in_progress()
    assert [(d.node, d.record_id) for d in drains] == [(node_name(1), request(1).record_id)]
