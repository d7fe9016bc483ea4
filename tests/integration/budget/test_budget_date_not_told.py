"""The budget's stamps are told on the API server's clock, which a reader learns from the answers' ``Date``. An answer
whose Date is missing or unreadable (a proxy in the way that drops or rewrites it, a gateway of its own) tells
nothing: the reader keeps the lead it measured last, rather than take its own clock for the API server's. A drain
function 5 minutes behind that took a mangled Date for "no lead" stamped its renewals 5 minutes old in the others'
view, and under a TTL below 5 minutes and a third of itself they granted its slot while its drain evicted
(invariant 1). On the sandbox API server, through the product's adapters."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.kube import httpd as sandbox_httpd
from tests.integration.budget.conftest import core_api
from tests.integration.budget.test_budget_clock_five_minutes_off import (
    behind_and_on_time,
    budget_of,
    held_all_along,
)
from tests.integration.budget.test_configmap_recreated import request

TTL = timedelta(seconds=420)  # under the skew and a third of itself


@pytest.mark.parametrize(
    "date",
    [
        pytest.param("", id="missing"),
        pytest.param("garbage", id="unreadable"),
        pytest.param("Sat, 05 Dec 2026 23:00:00 -0000", id="without its zone"),
    ],
)
def test_answers_whose_date_tells_nothing_keep_the_lead_measured_last(
    server: KubeServer, monkeypatch: pytest.MonkeyPatch, date: str
) -> None:
    # Given a budget of one slot shared by a container 5 minutes behind the API server and one on time, the late
    # one's drain of node 0 holding the slot (its lead measured by then)
    api = core_api(server)
    late_clock, clock = behind_and_on_time(server, monkeypatch)
    late, on_time = budget_of(api, late_clock, TTL), budget_of(api, clock, TTL)
    assert late.acquire(request(0)).granted

    # When the answers' Date stops telling the API server's time, and the late drain polls for two TTLs, renewing its
    # slot at each poll, while node 1 asks on the other container
    def told(self: Any, timestamp: float | None = None) -> str:
        return date

    monkeypatch.setattr(sandbox_httpd._Handler, "date_time_string", told)

    # Then node 1 waits all along: node 0's slot is held in the others' view
    held_all_along(late, on_time, TTL, late_clock, clock)
    api.api_client.close()
