"""API Priority and Fairness under load: kube-apiserver answers any request it sheds 429 with a Retry-After (a read
of the budget ConfigMap, its replace, the nodes' list as much as an eviction), before any handler: nothing done.
The product's client does not retry it (eks_access.CLIENT_RETRIES); the budget hands it to the step as a transient
error carrying the Retry-After, which the step waits out, and sends nothing more meanwhile. Nor does the
throttling cost a drain its slot or a waiter its place: nothing was written."""

from __future__ import annotations

import pytest
from kubernetes import client

from nodecycle.domain.budget import SlotReason
from nodecycle.domain.errors import TransientError
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import add_nodes, node_name
from tests.integration.budget.test_configmap_recreated import budget_of, polled, request
from tests.unit.budget.fakes import FakeClock

RETRY_AFTER = 7
LIMIT = "10%"  # of 6 nodes (2 a zone), rounded up: 1, in all and per zone; of the nodes listed at every ask


@pytest.mark.parametrize("target", ["GET configmaps", "PUT configmaps", "GET nodes"])
def test_a_throttled_request_of_the_budget_is_sent_once_and_its_retry_after_reaches_the_step(
    server: KubeServer, core: client.CoreV1Api, target: str
) -> None:
    # Given a budget of 10% (1 node) held by node 0's drain, and node 1 waiting in line
    add_nodes(server, 6)
    clock = FakeClock()
    assert budget_of(core, clock, "blue", LIMIT, LIMIT).acquire(request(0)).granted
    assert budget_of(core, clock, "blue", LIMIT, LIMIT).acquire(request(1)).reason is SlotReason.NO_ROOM
    clock.advance(200)  # (both due to be written again: renewed 100 s before their TTL of 300)

    # When the API server sheds every such request (429, Retry-After 7) while node 0's drain renews its slot and
    # node 1 asks again (each a new container's budget: its nodes not listed yet)
    server.faults.arm([Fault("apf", "kube-throttle", target=target, value=RETRY_AFTER)], seed=1)
    failures = []
    asks = [
        (budget_of(core, clock, "blue", LIMIT, LIMIT).renew, polled(0)),
        (budget_of(core, clock, "blue", LIMIT, LIMIT).acquire, request(1)),
    ]
    for ask, slot in asks:
        with pytest.raises(TransientError) as throttled:
            ask(slot)
        failures.append(throttled.value)
    fired = len(server.faults.firings())
    server.faults.disarm()

    # Then each is refused once, not sent again by the client or the store, and the step is told how long to wait
    assert [(f.retry_after, "429" in str(f)) for f in failures] == [(RETRY_AFTER, True)] * 2
    assert fired == 2
    # And nothing was lost: node 0 still holds its slot, node 1 is still first in line
    after = budget_of(core, clock, "blue", LIMIT, LIMIT)
    assert after.renew(polled(0)).reason is SlotReason.HELD
    assert [w.node for w in after.snapshot().waiters] == [node_name(1)]
