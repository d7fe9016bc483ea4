"""The first write of the budget (its ConfigMap shipped or created again empty) by a container whose clock runs 5
minutes behind the API server's: the store never creates the ConfigMap (its role may not: a missing one is
BudgetNotInstalled, see test_configmap_store), so the first document it writes goes into an object it read, on the
lead that read's Date told, as every other write does. On the sandbox API server, through the product's adapters."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import core_api
from tests.integration.budget.test_budget_clock_five_minutes_off import behind_and_on_time, budget_of
from tests.integration.budget.test_configmap_recreated import recreate_the_configmap, request

TTL = timedelta(seconds=420)


def test_the_first_document_a_late_container_writes_is_read_on_the_api_servers_clock(
    server: KubeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the budget ConfigMap created again empty, and a container 5 minutes behind the API server
    api = core_api(server)
    late_clock, clock = behind_and_on_time(server, monkeypatch)
    recreate_the_configmap(server)
    late = budget_of(api, late_clock, TTL)

    # When it writes the document's first version (node 0's slot)
    assert late.acquire(request(0)).granted

    # Then a container on time with the API server reads its stamps on the API server's clock, not 5 minutes behind
    on_time = budget_of(api, clock, TTL)
    doc = on_time._store.read()
    assert doc is not None
    assert abs(doc.holders[0].acquired_at - clock.now()) <= timedelta(seconds=2)
    api.api_client.close()
