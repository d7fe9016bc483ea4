"""The budget ConfigMap's creation on the function's clock. A lifecycle's beginning (``SlotRequest.since``) is stamped
by a function's clock, the ConfigMap's creationTimestamp by the API server's; a first ask's new slot is one the budget
cannot vouch for (``unmarked``: the mark of its release may have gone with the ConfigMap before, see
test_late_deliveries_after_recreation.py) when its lifecycle began before the creation, judged with a margin of 5 s
for the two clocks and the stamp's second. A function clock more than that ahead of the API server's took a lifecycle
begun just before the re-creation for one begun after it: its late first ask took a slot unjudged, held idle until
the sweeper or its TTL freed it. Every answer of the API server tells its time (the ``Date`` header, as Go's HTTP
server sends it), so the store puts the creation on the reader's clock. On the sandbox API server, its clock 7 s
behind the function's, through the product's adapters."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from types import SimpleNamespace

import pytest
from kubernetes import client

from nodecycle.domain.budget import SlotReason
from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.kube import api as sandbox_api
from tests.integration.budget.conftest import NAMESPACE, add_nodes, admin_api
from tests.integration.budget.test_budget_restored_document import NAME
from tests.integration.budget.test_configmap_recreated import budget_of, recreate_the_configmap, request
from tests.unit.budget.fakes import FakeClock

BEHIND = 7.0  # seconds the API server's clock runs behind the function's


def api_server_behind(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    monkeypatch.setattr(sandbox_api, "time", SimpleNamespace(time=lambda: time.time() - seconds))


def test_the_api_servers_answers_tell_its_time_by_the_clock_that_stamps_its_objects(
    server: KubeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an API server whose clock runs an hour behind
    api_server_behind(monkeypatch, 3600)

    # When the ConfigMap is created again, and read
    recreate_the_configmap(server)
    config_map, _, headers = admin_api(server).read_namespaced_config_map_with_http_info(NAME, NAMESPACE)

    # Then the answer's Date is the API server's time, by the clock that stamped the creation
    date = parsedate_to_datetime(headers["Date"])
    assert config_map.metadata is not None
    created = config_map.metadata.creation_timestamp
    assert created is not None
    assert created <= date < created + timedelta(seconds=5)
    assert abs((datetime.now(UTC) - timedelta(hours=1) - date).total_seconds()) < 5


def test_a_late_first_ask_of_a_lifecycle_begun_just_before_the_recreation_is_unmarked_with_a_clock_ahead(
    server: KubeServer, core: client.CoreV1Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an API server 7 s behind the function's clock, and a lifecycle of node 0 that began a second before the
    # ConfigMap was created again (by the function's clock, 6 s after its creationTimestamp)
    add_nodes(server, 6)
    api_server_behind(monkeypatch, BEHIND)
    clock = FakeClock(datetime.now(UTC))  # (just before the re-creation: a second before, and little more)
    recreate_the_configmap(server)
    blue = budget_of(core, clock, "blue")
    slot = replace(request(0), since=clock.now() - timedelta(seconds=1))
    clock.advance(2)

    # When its first ask takes a slot
    decision = blue.acquire(slot)

    # Then the slot is one the budget cannot vouch for: its record tells (AcquireSlot reads it)
    assert (decision.granted, decision.reason, decision.unmarked) == (True, SlotReason.GRANTED, True)


def test_a_first_ask_of_a_lifecycle_begun_after_the_recreation_is_not_unmarked_with_a_clock_behind(
    server: KubeServer, core: client.CoreV1Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an API server 7 s ahead of the function's clock (the function's behind), and a lifecycle of node 0 that
    # began 8 s after the ConfigMap was created again (by its creationTimestamp, a second before)
    add_nodes(server, 6)
    api_server_behind(monkeypatch, -BEHIND)
    recreate_the_configmap(server)
    clock = FakeClock(datetime.now(UTC))  # (just after the re-creation: 8 s after, and little more)
    blue = budget_of(core, clock, "blue")
    clock.advance(8)
    slot = replace(request(0), since=clock.now())

    # When its first ask takes a slot
    decision = blue.acquire(slot)

    # Then it is every drain's grant, past the margin: no record read for it
    assert (decision.granted, decision.reason, decision.unmarked) == (True, SlotReason.GRANTED, False)
