"""The budget's stamps told on the API server's clock to each reader (3f3090c) while containers of the version before
still run (a stack's update: the old version's containers finish their messages for minutes; or a stack of the
version before sharing the ConfigMap). The version before stamped on its own clock, and reads every stamp as its own.
With every container's clock 5 minutes off the API server's, the version before was consistent with itself; a reader
of this version that took its stamps for the API server's read an old container's holder 5 minutes older than it
was (a fleet behind), and an old container read this version's stamps, stored on the API server's clock, 5 minutes
older than they were (a fleet ahead): under a TTL below 5 minutes and a third of itself, the slot was granted again
while its drain evicted (invariant 1). Each writer stores its stamps on its own clock, and says its lead beside the
document (budget.clock), so that only this version's readers move them. On the sandbox API server, through the
product's adapters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from kubernetes import client

from nodecycle.adapters.kube.budget import CLOCK_KEY, ConfigMapBudgetStore
from nodecycle.domain.budget import DisruptionBudget
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import add_nodes, core_api
from tests.integration.budget.test_budget_clock_five_minutes_off import (
    behind_and_on_time,
    budget_of,
    held_all_along,
)
from tests.integration.budget.test_configmap_recreated import request
from tests.integration.budget.test_line_after_a_restore import on_the_api_servers_clock
from tests.unit.budget.fakes import FakeClock

TTL = timedelta(seconds=420)  # under the skew and a third of itself


class VersionBefore:
    """The API as a container of the version before reads and writes on it: it knows nothing of CLOCK_KEY (reads no
    entry's writer's lead), and keeps the key as it read it (as any key of the data it does not know)."""

    def __init__(self, api: client.CoreV1Api) -> None:
        self._api = api
        self._read: str | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._api, name)

    def read_namespaced_config_map_with_http_info(self, *args: Any, **kwargs: Any) -> Any:
        answer = self._api.read_namespaced_config_map_with_http_info(*args, **kwargs)
        self._read = (answer[0].data or {}).pop(CLOCK_KEY, None)
        return answer

    def replace_namespaced_config_map(self, name: str, namespace: str, body: Any, **kwargs: Any) -> Any:
        data = {key: value for key, value in body.data.items() if key != CLOCK_KEY}
        body.data = data if self._read is None else {**data, CLOCK_KEY: self._read}
        return self._api.replace_namespaced_config_map(name, namespace, body, **kwargs)


def version_before(budget: DisruptionBudget, monkeypatch: pytest.MonkeyPatch) -> None:
    """``budget`` as a container of the version before runs it: its stamps on its own clock, CLOCK_KEY unknown."""

    def own_clock(*_: Any) -> timedelta:
        return timedelta(0)

    store = cast("ConfigMapBudgetStore", budget._store)
    api = VersionBefore(store._api())
    monkeypatch.setattr(store, "_lead_of", own_clock)
    monkeypatch.setattr(store, "_api", lambda: api)


def test_a_new_container_keeps_the_slot_of_an_old_one_on_the_same_clock_5_minutes_behind(
    server: KubeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a budget of one slot, a container of the version before (its stamps on its own clock) holding node 0's
    # slot for its drain, and one of this version; both on a clock 5 minutes behind the API server's
    api = core_api(server)
    late_clock, clock = behind_and_on_time(server, monkeypatch)  # (``clock``: the API server's)
    old, new = budget_of(api, late_clock, TTL), budget_of(api, late_clock, TTL)
    version_before(old, monkeypatch)
    assert old.acquire(request(0)).granted

    # When its drain polls for two TTLs, renewing its slot at each poll, while node 1 asks on the new container,
    # Then node 1 waits all along: node 0's slot is held
    held_all_along(old, new, TTL, late_clock, clock)
    api.api_client.close()


def test_an_old_container_keeps_the_slot_of_a_new_one_on_the_same_clock_5_minutes_ahead(
    server: KubeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a budget of one slot, a container of this version holding node 0's slot for its drain, and one of the
    # version before; both on a clock 5 minutes ahead of the API server's
    api = core_api(server)
    add_nodes(server, 3)
    clock = FakeClock(datetime.now(UTC))  # the API server's
    on_the_api_servers_clock(clock, monkeypatch)
    early_clock = FakeClock(clock.now() + timedelta(minutes=5))
    new, old = budget_of(api, early_clock, TTL), budget_of(api, early_clock, TTL)
    version_before(old, monkeypatch)
    assert new.acquire(request(0)).granted

    # When its drain polls for two TTLs, renewing its slot at each poll, while node 1 asks on the old container
    # (whose writes keep the new one's note of its clock as it was), Then node 1 waits all along: node 0's slot is held
    held_all_along(new, old, TTL, early_clock, clock)
    api.api_client.close()
