"""A drain whose slot's renewal is refused mid-way: the budget ConfigMap crowded near the API server's 1 MiB by keys the
budget does not write (BudgetCrowdedOut), or the stack's binding to the budget's Role gone (403). Its poll evicts nothing
from the first refusal on, so when its holder expires and the slot is granted to another node, no two drains evict
under a budget of one (invariant 1). Its holder expired, its slot is lost for certain: from then on it waits for a slot
as a drain paused for a lost slot does, the wait not counted against its own drain timeout (invariant 9), so it does not
end its node's action at that timeout beside the node granted its slot; it ends at the latest its timeout policy may
act before the action's global timeout (invariant 2). On the sandbox API server, through the product's adapters and the
EVICT step."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client import PolicyV1Api, RbacAuthorizationV1Api, V1Pod, V1PodDisruptionBudget

from nodecycle.adapters.kube.budget import BudgetCrowdedOut
from nodecycle.domain.drain.common import _deadline_cap
from nodecycle.domain.drain.evict import READS_REFUSED
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE, admin_api, core_api, node_name
from tests.integration.budget.recreation import (
    BEGAN,
    evict_step,
    in_progress,
    lifecycle_of,
    record_of,
    six_nodes,
    slot_of,
)
from tests.integration.budget.test_configmap_recreated import TTL, budget_of, request
from tests.unit.drain.test_drain_steps import policy

MIB = 1024 * 1024
TIMEOUT_AT = BEGAN + timedelta(minutes=30)  # the drain's deadline (see lifecycle_of)
# The action's global timeout: its drain's deadline may be moved up to 8 min 5 s before it (the force grace, a stuck
# pod's minute and the settle margin of the test's policy), 12:35:55
GLOBAL_AT = BEGAN + timedelta(minutes=45)


def web_pod(node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "default", "labels": {"app": "web"}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "web", "image": "example.com/web:1"}],
        },
    }


def keep_a_pod_on(server: KubeServer, admin: client.CoreV1Api, node: str) -> None:
    """A pod on ``node`` that a PodDisruptionBudget keeps (minAvailable 1 of 1): each poll asks it to leave again."""
    admin.create_namespaced_pod("default", cast("V1Pod", web_pod(node)))
    PolicyV1Api(admin.api_client).create_namespaced_pod_disruption_budget(
        "default",
        cast(
            "V1PodDisruptionBudget",
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
            },
        ),
    )
    server.settle()  # (its budget observed by its controller: no room)


def test_a_drain_refused_its_renewal_evicts_nothing_while_its_expired_slot_is_granted_to_another(
    server: KubeServer,
) -> None:
    # Given a budget of 1 held by node 0's drain (claimed), whose pod a PodDisruptionBudget keeps (each poll asks it
    # to leave again), and node 1's lifecycle waiting for a slot
    core = core_api(server)
    clock, records, blue = six_nodes(server, core, total="1")
    slot = slot_of(0)
    in_progress(core, blue, records, slot)
    records.create(record_of(slot_of(1), Step.ACQUIRE_SLOT, seq=1))
    admin = admin_api(server)
    keep_a_pod_on(server, admin, node_name(0))
    record = lifecycle_of(slot, Step.EVICT, seq=3)
    every = policy().poll_seconds

    def evictions() -> int:
        return server.counters().get(("create", "pods/eviction"), 0)

    def polled() -> Outcome:
        nonlocal record
        clock.advance(every)
        outcome = evict_step(core, blue, slot)(record, clock.now())
        fields = {k: v for k, v in outcome.changes.items() if k in LifecycleRecord.model_fields}
        record = record.model_copy(update=fields)
        return outcome

    assert polled().again
    assert evictions() == 1
    # When a backup pasted beside the document fills the ConfigMap's data to 10 bytes short of 1 MiB, which leaves
    # no room for the holder's clock note: each renewal of node 0's drain that writes is refused (BudgetCrowdedOut)
    data: dict[str, str] = admin.read_namespaced_config_map("nodecycle-budget", NAMESPACE).data or {}
    backup = MIB - sum(len(value.encode()) for value in data.values()) - 10
    admin.patch_namespaced_config_map("nodecycle-budget", NAMESPACE, {"data": {"backup.json": "x" * backup}})
    # ...and node 0's drain polls on past its holder's expiry, node 1 asking at each poll
    refused_at = None
    after_refusal = 0
    while refused_at is None or clock.now() < refused_at + TTL + timedelta(seconds=2 * every):
        assert polled().again
        if READS_REFUSED in record.extra and refused_at is None:
            refused_at, after_refusal = clock.now(), evictions()
        with pytest.raises(BudgetCrowdedOut):
            blue.acquire(slot_of(1))

    # Then node 0's drain evicted nothing from its first refused renewal on, and nobody took its slot meanwhile
    assert refused_at is not None
    assert evictions() == after_refusal
    # And once the backup is moved out, its holder expired, node 1 is granted the slot; node 0's drain, which lost
    # it, evicts nothing at its next polls (paused, in line), beside node 1's
    admin.patch_namespaced_config_map("nodecycle-budget", NAMESPACE, {"data": {"backup.json": None}})
    assert blue.acquire(slot_of(1)).granted
    for _ in range(3):
        assert polled().again
    assert evictions() == after_refusal
    assert record.drain_paused_at is not None
    assert [h.node for h in blue.snapshot().holders] == [node_name(1)]
    admin.api_client.close()


def test_a_drain_refused_its_renewal_past_its_slot_s_expiry_does_not_end_beside_the_node_granted_its_slot(
    server: KubeServer,
) -> None:
    # Given a budget of 1 held by stack blue's drain of node 0 (claimed), whose pod a PodDisruptionBudget keeps
    api = core_api(server)
    clock, records, blue = six_nodes(server, api, total="1")
    slot = slot_of(0)
    in_progress(api, blue, records, slot)
    admin = admin_api(server)
    keep_a_pod_on(server, admin, node_name(0))
    record = lifecycle_of(slot, Step.EVICT, seq=3).model_copy(update={"global_deadline": GLOBAL_AT})
    every = policy().poll_seconds
    # When blue's binding to the budget's Role is deleted (a GitOps prune of one stack's RBAC), stack green's kept
    admin.api_client.close()
    RbacAuthorizationV1Api(server.api_client()).delete_namespaced_role_binding("nodecycle-budget", NAMESPACE)
    # (green's drain: the administrator's client stands in for its own identity, which its binding still lets in)
    green = budget_of(admin_api(server), clock, "green", "1", "1")
    # ...blue's drain polls, refused its renewal at each, and green's node 1 asks at each poll
    granted_at: datetime | None = None
    refused_at: datetime | None = None

    def polled(until: datetime) -> Outcome:
        nonlocal record, granted_at, refused_at
        outcome = None
        while outcome is None or (outcome.again and clock.now() < until):
            clock.advance(every if outcome is None else max(every, outcome.delay))  # (as its waits ask)
            outcome = evict_step(api, blue, slot)(record, clock.now())
            record = record.model_copy(
                update={k: v for k, v in outcome.changes.items() if k in LifecycleRecord.model_fields}
            )
            if refused_at is None and READS_REFUSED in record.extra:
                refused_at = clock.now()
            if granted_at is None and green.acquire(request(1, owner="green")).granted:
                granted_at = clock.now()
        return outcome

    outcome = polled(TIMEOUT_AT + timedelta(seconds=2 * every))
    # (green's node was granted the slot once blue's holder expired, a TTL after its last renewal)
    assert granted_at is not None
    assert granted_at < TIMEOUT_AT
    assert [h.node for h in green.snapshot().holders] == [node_name(1)]
    assert server.get_object("pods", "web-0", "default") is not None

    # Then blue's drain, which lost its slot a TTL after its first refusal, does not end its node's action (its
    # instance terminated, the pod the PodDisruptionBudget keeps with it) beside node 1's drain, the budget's one
    # slot: the time past its slot's expiry is a wait for a slot, not drain time (invariant 9), as a paused drain's
    assert outcome.again, outcome
    assert refused_at is not None
    assert record.drain_paused_at == refused_at + policy().holder_ttl
    # And, the budget refusing it to the end (node 1 never releasing here), it ends at the latest its timeout policy
    # may act before the action's global timeout (invariant 2: Auto Scaling's own timeout would end it there
    # anyway), a drain timeout (drain-timeout-reads-refused) 6 min 55 s past its own, having evicted nothing
    outcome = polled(GLOBAL_AT)
    assert (outcome.then, outcome.changes.get("outcome")) == (Step.COMPLETE, "drain-timeout-reads-refused")
    assert clock.now() == _deadline_cap(record, policy()) < GLOBAL_AT
    assert server.counters().get(("create", "pods/eviction"), 0) == 0
