"""Entries of the budget's document that no clock of a running stack could have written: a ``kubectl edit`` that
typed the wrong year into a holder's ``renewedAt``, or a TTL of thirty years, in another owner's entry that nothing
renews nor sweeps (the owner's stack deleted, or not counting it stale). On the sandbox API server, through the
product's adapters.

An entry expires a TTL after its renewal, and only the owner's sweeper judges it sooner: such a holder took a slot
in every stack's view until 2030, and no drain holds a slot past its timeout, force grace and a margin (invariant
10). Nor does its own drain's renewal fix it: renewed "lately" (in the future), it writes none. An entry renewed
further ahead of the writer's clock than any clock skew (``MAX_CLOCK_AHEAD``), or kept longer than any holder TTL
a stack may have (``MAX_ENTRY_TTL``), expires now; its owner's drain, if it is alive, asks again as one whose slot
expired."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from kubernetes import client

from nodecycle.domain.budget import SlotReason
from nodecycle.domain.budget.document import MAX_CLOCK_AHEAD, MAX_ENTRY_TTL
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE, add_nodes, instance_of, node_name, zone_of
from tests.integration.budget.test_configmap_recreated import budget_of, request
from tests.unit.budget.fakes import START, FakeClock

# the edit, and how long after it blue's nodes ask
EDITS: dict[str, tuple[dict[str, object], timedelta]] = {
    "renewed-in-2030": ({"renewedAt": "2030-03-01T12:00:00Z", "ttlSeconds": 600}, timedelta(0)),
    "renewed-past-the-skew": (
        {"renewedAt": (START + MAX_CLOCK_AHEAD + timedelta(seconds=1)).isoformat(), "ttlSeconds": 600},
        timedelta(0),
    ),
    "a-ttl-of-thirty-years": (
        {"renewedAt": START.isoformat(), "ttlSeconds": 30 * 365 * 86400},
        MAX_ENTRY_TTL,  # the longest TTL a stack may have
    ),
}


def green_holder(i: int, edit: dict[str, object]) -> dict[str, object]:
    return {
        "node": node_name(i),
        "instanceId": instance_of(i),
        "zone": zone_of(i),
        "owner": "green",
        "recordId": f"{instance_of(i)}/terminate/tok-{i}",
        "acquiredAt": START.isoformat(),
        **edit,
    }


@pytest.mark.parametrize("case", sorted(EDITS))
def test_another_owners_holder_no_clock_could_have_renewed_is_not_kept(
    server: KubeServer, core: client.CoreV1Api, case: str
) -> None:
    # Given a budget of 2 whose document someone edited: green's holder of node 4 renewed in a way no running
    # stack writes
    add_nodes(server, 6)
    clock = FakeClock()
    blue = budget_of(core, clock, "blue")
    edit, after = EDITS[case]
    document = {"formatVersion": 3, "holders": [green_holder(4, edit)], "waiters": [], "released": []}
    server.replace_config_map_data(NAMESPACE, "nodecycle-budget", {"budget.json": json.dumps(document)})

    # When blue's nodes ask (for a TTL of thirty years: once the longest TTL a stack may have has passed)
    clock.advance(after.total_seconds())
    first = blue.acquire(request(0))
    second = blue.acquire(request(1))

    # Then green's holder is gone, and both of blue's slots are blue's
    assert (first.granted, second.granted) == (True, True)
    assert {h.node for h in blue.snapshot().holders} == {node_name(0), node_name(1)}


def test_a_holder_renewed_within_the_clock_skew_counts_until_its_ttl(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given green's holder of node 4 renewed by a container whose clock runs a few seconds ahead
    add_nodes(server, 6)
    clock = FakeClock()
    blue = budget_of(core, clock, "blue", total="1", per_zone="1")
    ahead = {"renewedAt": (START + timedelta(seconds=5)).isoformat(), "ttlSeconds": 600}
    document = {"formatVersion": 3, "holders": [green_holder(4, ahead)], "waiters": [], "released": []}
    server.replace_config_map_data(NAMESPACE, "nodecycle-budget", {"budget.json": json.dumps(document)})

    # When blue's node asks, then asks again past the holder's TTL
    waiting = blue.acquire(request(0))
    clock.advance(605)
    later = blue.acquire(request(0))

    # Then it waits while green's holder lives, and takes the slot once it expired
    assert (waiting.granted, waiting.reason) == (False, SlotReason.NO_ROOM)
    assert later.granted
