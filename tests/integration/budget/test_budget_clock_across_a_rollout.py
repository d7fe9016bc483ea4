"""The budget's stamps on the API server's clock (3f3090c) while containers of the version before it still run (a
stack's update: the old version's containers finish their messages for minutes; or a stack of the version before
sharing the ConfigMap). The version before stamped on its own clock. With every container's clock 5 minutes behind
the API server's, the version before was consistent with itself; this version reads the old container's stamps as
if on the API server's clock, 5 minutes older than they are, and under a TTL below 5 minutes and a third of itself
its write removes the old container's holder as expired and grants the slot while that drain evicts (invariant 1).
On the sandbox API server, through the product's adapters."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from nodecycle.domain.budget import SlotReason
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import core_api
from tests.integration.budget.test_budget_clock_five_minutes_off import POLL, behind_and_on_time, budget_of
from tests.integration.budget.test_configmap_recreated import request

TTL = timedelta(seconds=420)  # under the skew and a third of itself


@pytest.mark.xfail(
    strict=True,
    reason="the document does not say on which clock its stamps are: a reader of this version takes the version "
    "before's stamps (its writer's clock) for the API server's. Fix: mark a document stored on the API server's clock "
    "beside it (a data key holding its text's hash, as budget.written does: the document itself forbids new fields, "
    "which the version before would refuse as a newer format, and that version keeps other keys as they were, so a "
    "hash tells a document it rewrote); read an unmarked one on the reader's own clock, as that version did. Open: "
    "when a writer may mark an unmarked document (under a skew, never marking leaves the skew's failure as before)",
)
def test_a_new_container_keeps_the_slot_of_an_old_one_on_the_same_clock_5_minutes_behind(
    server: KubeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a budget of one slot, a container of the version before (its stamps on its own clock) holding node 0's
    # slot for its drain, and one of this version; both on a clock 5 minutes behind the API server's
    api = core_api(server)
    late_clock, clock = behind_and_on_time(server, monkeypatch)  # (``clock``: the API server's)
    old, new = budget_of(api, late_clock, TTL), budget_of(api, late_clock, TTL)

    def own_clock(*_: Any) -> timedelta:
        return timedelta(0)

    monkeypatch.setattr(old._store, "_lead_of", own_clock)
    assert old.acquire(request(0)).granted

    # When its drain polls for two TTLs, renewing its slot at each poll, while node 1 asks on the new container
    for _ in range(int(2 * TTL.total_seconds()) // POLL):
        for c in (late_clock, clock):
            c.advance(POLL)
        assert old.renew(request(0)).reason is SlotReason.HELD

        # Then node 1 waits all along: node 0's slot is held
        assert new.acquire(request(1)).reason is SlotReason.NO_ROOM
    api.api_client.close()
