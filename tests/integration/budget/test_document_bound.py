"""The budget document stays under the API server's 1 MiB limit for a ConfigMap: its queue is bounded, a node
that finds it full waits outside it (with a metric and a clear log line), and a write the server refuses
anyway is a clear, retried error, never a silent loss."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from kubernetes import client

from nodecycle.adapters.kube.budget import ConfigMapBudgetStore, KubeNodeInventory
from nodecycle.adapters.kube.core_v1 import CoreV1
from nodecycle.domain.budget import (
    BudgetDocument,
    BudgetLimits,
    DisruptionBudget,
    Holder,
    SlotReason,
    SlotRequest,
    Waiter,
)
from nodecycle.domain.budget.limits import owner_limits
from nodecycle.domain.budget.rules import MAX_DOCUMENT_BYTES, MAX_WAITERS
from nodecycle.domain.errors import TransientError
from nodecycle.domain.policy import Quantity
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import (
    NAMESPACE,
    RBAC,
    ZONES,
    act_as_drain,
    admin_api,
    core_api,
    zone_of,
)
from tests.support.fakes import FakeClock, FakeMetrics

NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


def waiters(count: int) -> tuple[Waiter, ...]:
    """Realistic entries: EKS node names, instance ids, record ids with UUID tokens."""
    return tuple(
        Waiter(
            node=f"ip-10-{i // 62500}-{i // 250 % 250}-{i % 250}.eu-west-1.compute.internal",
            instance_id=f"i-0{i:016x}",
            zone=("eu-west-1a", "eu-west-1b", "eu-west-1c")[i % 3],
            owner="nodes-general",
            record_id=f"i-0{i:016x}/terminate/8e3c2a1f-5b7d-4c9e-a1b2-{i:012x}",
            waiting_since=NOW,
            renewed_at=NOW,
            ttl_seconds=600,
        )
        for i in range(count)
    )


def stored(server: KubeServer) -> Any:
    """The ConfigMap as the API server has it (raw JSON), read by the administrator's official client."""
    response: Any = admin_api(server).read_namespaced_config_map(
        "nodecycle-budget", NAMESPACE, _preload_content=False
    )
    return json.loads(response.data)


def budget(core: client.CoreV1Api, clock: FakeClock, metrics: FakeMetrics) -> DisruptionBudget:
    return DisruptionBudget(
        store=ConfigMapBudgetStore(lambda: core, NAMESPACE, sleep=lambda seconds: None),
        nodes=KubeNodeInventory(lambda: core),
        clock=clock,
        metrics=metrics,
        limits=BudgetLimits(Quantity(value=1)),
        holder_ttl=timedelta(minutes=10),
        count_unavailable=False,
        owner="nodes-general",
    )


def test_a_full_queue_leaves_a_newcomer_outside_and_writes_nothing(
    core: client.CoreV1Api, server: KubeServer
) -> None:
    # Given a budget whose one slot is held and whose queue holds its maximum of waiters
    clock, metrics = FakeClock(NOW), FakeMetrics()
    shared = budget(core, clock, metrics)
    assert shared.acquire(SlotRequest("held", "i-held", "eu-west-1a", "nodes-general", "rec-held")).granted
    store = ConfigMapBudgetStore(lambda: core, NAMESPACE)
    store.update(
        lambda doc: ((doc or BudgetDocument()).model_copy(update={"waiters": waiters(MAX_WAITERS)}), None)
    )
    text = stored(server)["data"]["budget.json"]
    assert len(text) < 1024 * 1024 * 0.7  # the bound keeps it well under the API server's limit
    version = stored(server)["metadata"]["resourceVersion"]

    # When one more node asks for a slot
    decision = shared.acquire(SlotRequest("late", "i-late", "eu-west-1b", "nodes-general", "rec-late"))

    # Then it is told the queue is full, counted, and nothing was written
    assert (decision.granted, decision.reason) == (False, SlotReason.QUEUE_FULL)
    assert metrics.counts["BudgetQueueFull"] == 1
    assert stored(server)["metadata"]["resourceVersion"] == version


def test_a_document_the_api_server_refuses_is_a_clear_transient_error(core: client.CoreV1Api) -> None:
    # Given a document over the API server's 1 MiB limit (no version of nodecycle writes one: a hand edit,
    # or a bug)
    oversized = BudgetDocument(waiters=waiters(4000))
    assert len(oversized.to_json()) > 1024 * 1024
    store = ConfigMapBudgetStore(lambda: core, NAMESPACE)

    # When it is written, Then the server's refusal (422) is raised as a transient error naming the size
    with pytest.raises(
        TransientError, match=rf"refused ConfigMap {NAMESPACE}/nodecycle-budget \(\d+ bytes\).*Too long"
    ):
        store.update(lambda doc: (oversized, None))


def forced_holders(count: int, owner: str = "nodes-general") -> tuple[Holder, ...]:
    """``owner``'s nodes that took a slot without room, their actions' global timeouts near (a scale-in longer
    than them)."""
    return tuple(
        Holder(
            node=f"ip-10-9-{i // 250}-{i % 250}.eu-west-1.compute.internal",
            instance_id=f"i-1{i:016x}",
            zone="eu-west-1b",
            owner=owner,
            record_id=f"i-1{i:016x}/terminate/5c1d9e2a-7f3b-4a6c-b8d0-{i:012x}",
            token=f"5c1d9e2a-7f3b-4a6c-b8d0-{i:012x}",
            renewed_at=NOW,
            acquired_at=NOW,
            ttl_seconds=600,
            forced=True,
        )
        for i in range(count)
    )


def most_forced_holders(queue: BudgetDocument, bound: int, held: tuple[Holder, ...] = ()) -> int:
    """The most forced holders, at most 1300, that ``queue`` with ``held`` takes within ``bound`` bytes: what
    counting down from 1300 one at a time finds, found by bisection (each holder lengthens the document), in
    a dozen serializations of the 1 MiB document rather than hundreds (33 s of a test)."""
    holders = forced_holders(1300)

    def fits(count: int) -> bool:
        return len(queue.model_copy(update={"holders": (*held, *holders[:count])}).to_json()) <= bound

    if fits(len(holders)):
        return len(holders)
    low, high = 0, len(holders)  # fits(low) (the queue alone fits), not fits(high)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def test_a_forced_slot_that_would_pass_the_configmap_limit_takes_the_place_of_the_youngest_waiter(
    core: client.CoreV1Api, server: KubeServer
) -> None:
    # Given a scale-in of thousands of nodes: a full queue, and hundreds of nodes that could not join it and
    # took forced slots as their global timeouts came near, the document a few KiB under the API server's 1 MiB
    clock, metrics = FakeClock(NOW), FakeMetrics()
    store = ConfigMapBudgetStore(lambda: core, NAMESPACE)
    queue = BudgetDocument(waiters=waiters(MAX_WAITERS))
    count = most_forced_holders(queue, 1024 * 1024)
    full = queue.model_copy(update={"holders": forced_holders(count)})
    assert 1024 * 1024 - 400 < len(full.to_json()) <= 1024 * 1024
    store.update(lambda doc: (full, None))

    # When one more node outside the queue must go (its action's global timeout is too near to wait)
    late = SlotRequest(
        "ip-10-9-200-1.eu-west-1.compute.internal",
        "i-0fedcba9876543210",
        "eu-west-1c",
        "nodes-general",
        "i-0fedcba9876543210/terminate/0b6f2d4e-3a1c-4e8b-9d7f-5a2c4e6b8d0f",
        token="0b6f2d4e-3a1c-4e8b-9d7f-5a2c4e6b8d0f",
        force=True,
    )
    decision = budget(core, clock, metrics).acquire(late)

    # Then it takes its forced slot, and the youngest waiter of its stack gives up its place in line for it (it
    # asks again later, as a node that found the queue full), counted, so that the write stays under 1 MiB
    assert (decision.granted, decision.reason) == (True, SlotReason.FORCED)
    doc = BudgetDocument.from_json(stored(server)["data"]["budget.json"])
    assert doc.holder(late.node) is not None
    assert len(doc.to_json()) <= 1024 * 1024
    youngest = waiters(MAX_WAITERS)[-1]
    assert doc.waiter(youngest.node) is None
    assert [w.node for w in doc.waiters] == [w.node for w in waiters(MAX_WAITERS)[: len(doc.waiters)]]
    assert metrics.counts["BudgetQueueFull"] == MAX_WAITERS - len(doc.waiters) >= 1


def cluster_node(index: int) -> str:
    """A node of the cluster, none of them in :func:`waiters`' line."""
    return f"ip-10-8-{index // 250}-{index % 250}.eu-west-1.compute.internal"


@pytest.fixture(scope="module")
def outage() -> Iterator[KubeServer]:
    """A cluster of 5,000 nodes over three zones, zone eu-west-1a's NotReady (its 1,667 nodes: the zone is down),
    as deployed (deploy/rbac.yaml, the drain role's access). Registered once for the module's tests, which only
    read the nodes; each starts with the budget ConfigMap created again as shipped (see ``outage_core``)."""
    # (the kubelets renew their Leases every 30 s, not 10, and the node monitor's grace is 2 minutes, not 40 s: the
    # same ratio, each node as Ready or NotReady for the tests as it registered, and a third of the renewals, each a
    # write of 5,000 Leases and a controller pass over 5,000 nodes: the idle cluster took 0.22 CPU-s a second; their
    # unchanged status posted every 5 minutes, as a real kubelet's nodeStatusReportFrequency, not the sandbox's 20 s)
    with KubeServer(
        tls=True, node_lease_renew_seconds=30, node_monitor_grace_seconds=120, node_status_report_seconds=300
    ) as started:
        act_as_drain(started)
        # (the controllers held back while the nodes register, then answering every registration in one pass, as
        # the tests find them: each registration is a write, and each write set off a pass over every node
        # registered so far, 5,000 passes of up to 5,000 nodes, most of the file's CPU)
        with started.paused_controllers():
            for i in range(5000):
                started.add_node(
                    cluster_node(i), instance_id=f"i-2{i:016x}", zone=zone_of(i), ready=zone_of(i) != ZONES[0]
                )
        started.settle(timeout=120)
        yield started


@pytest.fixture(params=["CoreV1Api", "CoreV1"])
def outage_core(outage: KubeServer, request: pytest.FixtureRequest) -> Iterator[client.CoreV1Api]:
    """The drain's client on the ``outage`` cluster, the official one or the product's (as ``core``), its budget
    ConfigMap deleted and created again as shipped: no document of an earlier test."""
    admin = admin_api(outage)
    admin.delete_namespaced_config_map("nodecycle-budget", NAMESPACE)
    outage.apply(RBAC)
    assert admin.read_namespaced_config_map("nodecycle-budget", NAMESPACE).data is None
    api = core_api(outage)
    yield api if request.param == "CoreV1Api" else cast("client.CoreV1Api", CoreV1(api.api_client))
    api.api_client.close()


def test_stacks_counting_a_zone_outages_unavailable_nodes_keep_the_document_under_the_configmap_limit(
    outage_core: client.CoreV1Api, outage: KubeServer
) -> None:
    # Given a cluster of 5,000 nodes over three zones, shared by two stacks that count unavailable nodes, and
    # the document of a long scale-in at its bound before anything was unavailable (a full queue, and forced
    # slots that shed waiters to stay under it), each stack holding a slot
    core, server = outage_core, outage
    clock, metrics = FakeClock(NOW), FakeMetrics()
    stacks = {
        owner: DisruptionBudget(
            store=ConfigMapBudgetStore(lambda: core, NAMESPACE, sleep=lambda seconds: None),
            nodes=KubeNodeInventory(lambda: core),
            clock=clock,
            metrics=metrics,
            limits=BudgetLimits(Quantity(value=2), Quantity(value=1)),
            holder_ttl=timedelta(minutes=10),
            count_unavailable=True,
            owner=owner,
        )
        for owner in ("nodes-general", "nodes-batch")
    }
    before = {
        owner: owner_limits(stack_limits, count_unavailable=True, nodes=(), now=NOW)
        for owner, stack_limits in {
            "nodes-general": BudgetLimits(Quantity(value=2), Quantity(value=1)),
            "nodes-batch": BudgetLimits(Quantity(value=2), Quantity(value=1)),
        }.items()
    }
    held = tuple(
        Holder(
            node=cluster_node(4001 + n),
            instance_id=f"i-2{4001 + n:016x}",
            zone=zone_of(4001 + n),
            owner=owner,
            record_id=f"i-2{4001 + n:016x}/terminate/rec",
            renewed_at=NOW,
            acquired_at=NOW,
            ttl_seconds=600,
        )
        for n, owner in enumerate(stacks)
    )
    queue = BudgetDocument(waiters=waiters(MAX_WAITERS), limits=before)
    count = most_forced_holders(queue, MAX_DOCUMENT_BYTES, held)
    full = queue.model_copy(update={"holders": (*held, *forced_holders(count))})
    ConfigMapBudgetStore(lambda: core, NAMESPACE).update(lambda doc: (full, None))

    # When zone eu-west-1a is down (its 1,667 nodes NotReady: see ``outage``) and each stack gives its slot back
    for holder, stack in zip(held, stacks.values(), strict=True):
        stack.release(holder.node, holder.record_id)

    # Then both writes are stored, under the API server's 1 MiB
    doc = BudgetDocument.from_json(stored(server)["data"]["budget.json"])
    assert not {h.node for h in held} & {h.node for h in doc.holders}
    assert len(doc.to_json().encode()) <= 1024 * 1024
