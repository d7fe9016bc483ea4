"""The budget's clock note (budget.clock) squeezed out of a ConfigMap that keys the budget does not write fill near the
API server's 1 MiB: a drain function whose clock runs 5 minutes behind the API server's renews its slot, the note
that tells its lead no longer fits beside the document, and a container on time reads the holder on its own clock,
5 minutes old: expired under a TTL of 7 minutes two minutes after each renewal, its slot granted again while the
drain evicts (invariant 1). A write that would leave a holder's lead out for want of the room others' keys take is
refused as a crowded ConfigMap is (BudgetCrowdedOut), not written so. On the sandbox API server, through the
product's adapters."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.adapters.kube.budget import BudgetCrowdedOut
from nodecycle.domain.budget import SlotReason
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE, core_api, node_name
from tests.integration.budget.test_budget_clock_five_minutes_off import POLL, behind_and_on_time, budget_of
from tests.integration.budget.test_configmap_recreated import request
from tests.support.budget_refusals import CONFIGMAP, paste_a_backup

TTL = timedelta(seconds=420)


def test_a_holder_s_lead_is_never_squeezed_out_of_a_crowded_configmap(
    server: KubeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a budget of one slot shared by a container 5 minutes behind the API server and one on time, the late
    # one's drain of node 0 holding it
    api = core_api(server)
    late_clock, clock = behind_and_on_time(server, monkeypatch)
    late, on_time = budget_of(api, late_clock, TTL), budget_of(api, clock, TTL)
    assert late.acquire(request(0)).granted
    # When someone pastes a backup beside the document that fills the ConfigMap's data to 10 bytes short of 1 MiB
    assert "budget.clock" in (api.read_namespaced_config_map(CONFIGMAP, NAMESPACE).data or {})
    paste_a_backup(server, short_of_a_mib=10)

    # ...and node 0's drain polls for a TTL, renewing its slot (or refused it, the ConfigMap crowded), while
    # node 1 asks on the container on time
    granted = []
    for _ in range(int(TTL.total_seconds()) // POLL):
        late_clock.advance(POLL)
        clock.advance(POLL)
        for budget, slot in ((late, request(0)), (on_time, request(1))):
            try:
                decision = budget.acquire(slot) if slot.node == node_name(1) else budget.renew(slot)
            except BudgetCrowdedOut:
                continue
            if decision.granted and decision.reason is not SlotReason.HELD:
                granted.append((slot.node, decision.reason))

    # Then node 1 is never granted node 0's slot, nor node 0 its own again
    assert granted == []
    api.api_client.close()
