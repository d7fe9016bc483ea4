"""How many holders and waiters the budget document holds under the API server's 1 MiB bound on a ConfigMap's data,
with EKS node names, instance ids and record ids of UUID tokens, and long stack names: a 300-node refresh, and a
5,000-node cluster shared by four stacks. A new waiter is let in only while the document stays under
``MAX_DOCUMENT_BYTES`` (900 KiB); what it writes later grows it still (its precedence: urgent, in progress; the
times it was passed over), with no check: the bound must leave room for all of it, or the API server refuses every
write of the document, the holders' renewals and releases among them, until waiters give up."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from nodecycle.domain.budget.document import (
    BudgetDocument,
    Holder,
    NodeRef,
    OwnerLimits,
    ResolvedLimits,
    Waiter,
    ZoneLimits,
)
from nodecycle.domain.budget.rules import MAX_DOCUMENT_BYTES, MAX_WAITERS

NOW = datetime(2026, 12, 5, 20, 0, 0, 123456, tzinfo=UTC)
ZONES = ("eu-west-1a", "eu-west-1b", "eu-west-1c")
OWNERS = tuple(f"nodecycle-production-nodegroup-general-purpose-{s}" for s in range(4))
CONFIGMAP_LIMIT = 1024 * 1024  # the API server's bound on a ConfigMap's data
NOTE = 200  # what the ConfigMap's other keys take beside the document (budget.written, budget.restored)


def _entry(i: int) -> dict[str, Any]:
    token = f"8e3c2a1f-5b7d-4c9e-a1b2-{i:012x}"
    return {
        "node": f"ip-10-{i // 62500}-{i // 250 % 250}-{i % 250}.eu-west-1.compute.internal",
        "instance_id": f"i-0{i:016x}",
        "zone": ZONES[i % 3],
        "owner": OWNERS[i % len(OWNERS)],
        "record_id": f"i-0{i:016x}/terminate/{token}",
        "token": token,
        "renewed_at": NOW,
        "ttl_seconds": 600,
    }


def _limits(unavailable: int) -> OwnerLimits:
    nodes = tuple(
        NodeRef(name=f"ip-10-9-{k // 250}-{k % 250}.eu-west-1.compute.internal", zone=ZONES[k % 3])
        for k in range(unavailable)
    )
    return OwnerLimits(
        max_unavailable="10%",
        max_unavailable_per_zone="5%",
        count_unavailable=True,
        nodes_in_scope=1250,
        resolved=ResolvedLimits(total=125, per_zone=ZoneLimits(by_zone=dict.fromkeys(ZONES, 21), other=21)),
        unavailable=nodes,
        updated_at=NOW,
    )


def document(holders: int, waiters: int, *, unavailable: int = 125, **grown: Any) -> BudgetDocument:
    """``holders`` and ``waiters`` of the four stacks, each stack's limits recording ``unavailable`` nodes; the
    waiters with the fields ``grown`` (their precedence, their passes)."""
    return BudgetDocument(
        holders=tuple(Holder(**_entry(i), acquired_at=NOW) for i in range(holders)),
        waiters=tuple(Waiter(**_entry(holders + i), waiting_since=NOW, **grown) for i in range(waiters)),
        limits={owner: _limits(unavailable) for owner in OWNERS},
    )


def let_in(holders: int) -> int:
    """How many waiters the line lets in beside ``holders``: up to MAX_WAITERS, while under MAX_DOCUMENT_BYTES."""
    low, high = 0, MAX_WAITERS
    while low < high:
        middle = (low + high + 1) // 2
        if len(document(holders, middle).to_json()) <= MAX_DOCUMENT_BYTES:
            low = middle
        else:
            high = middle - 1
    return low


def test_a_300_node_refresh_takes_an_eighth_of_the_configmap() -> None:
    assert len(document(30, 270, unavailable=0).to_json()) < CONFIGMAP_LIMIT / 8


def test_a_full_line_of_four_stacks_grown_to_its_worst_stays_under_the_configmap_limit() -> None:
    for holders in (0, 500):
        # Given the line let in as far as it goes beside the holders of four stacks of a 5,000-node cluster
        waiters = let_in(holders)
        assert waiters >= 1700

        # When every waiter becomes urgent, is passed over ten times, and is a drain in progress
        grown = document(holders, waiters, urgent_at=NOW, passed=10, in_progress=True)

        # Then the document and the ConfigMap's other keys still fit the API server's limit
        assert len(grown.to_json()) + NOTE <= CONFIGMAP_LIMIT, (holders, waiters)
