"""A drain function whose clock runs 5 minutes behind the others' (and the API server's), sharing the budget with
them: every holder it renewed looked 5 minutes old to the others the moment it was written. Its renewals are written
a third of the TTL apart (by its own clock), and each poll checks; so to the others its holder looks at most
5 min + TTL/3 + a poll old, and expires in their view once that reaches the TTL: they remove it and grant its slot
to another node while its drain goes on evicting (invariant 1), until its next poll finds the slot lost. The budget's
stamps are told on the API server's clock, which each reader is told by the API server's answers (their Date). On
the sandbox API server, through the product's adapters."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client

from nodecycle.adapters.kube.budget import ConfigMapBudgetStore, KubeNodeInventory
from nodecycle.adapters.kube.eks_access import CLIENT_RETRIES
from nodecycle.domain.budget import BudgetLimits, DisruptionBudget, SlotReason
from nodecycle.domain.policy import Quantity
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import DRAIN_KEY, NAMESPACE, add_nodes, core_api
from tests.integration.budget.drains import SharedMetrics
from tests.integration.budget.test_configmap_recreated import request
from tests.integration.budget.test_line_after_a_restore import on_the_api_servers_clock
from tests.unit.budget.fakes import FakeClock

BEHIND = timedelta(minutes=5)
POLL = 15  # seconds between a drain's polls, each renewing its slot


def budget_of(
    api: client.CoreV1Api, clock: FakeClock, ttl: timedelta, wall_clock: Callable[[], float] | None = None
) -> DisruptionBudget:
    return DisruptionBudget(
        store=ConfigMapBudgetStore(
            lambda: api,
            NAMESPACE,
            sleep=lambda _: None,
            wall_clock=wall_clock or (lambda: clock.now().timestamp()),
        ),
        nodes=KubeNodeInventory(lambda: api, with_status=False),
        clock=clock,
        metrics=SharedMetrics(),
        limits=BudgetLimits(Quantity.parse("1"), Quantity.parse("1")),
        holder_ttl=ttl,
        count_unavailable=False,
        owner="blue",
    )


def behind_and_on_time(server: KubeServer, monkeypatch: pytest.MonkeyPatch) -> tuple[FakeClock, FakeClock]:
    """Three nodes, and the clocks of two containers: one 5 minutes behind, one on time with the API server's."""
    add_nodes(server, 3)
    now = datetime.now(UTC)
    late_clock, clock = FakeClock(now - BEHIND), FakeClock(now)
    on_the_api_servers_clock(clock, monkeypatch)
    return late_clock, clock


def held_all_along(
    holder: DisruptionBudget, asker: DisruptionBudget, ttl: timedelta, *clocks: FakeClock
) -> None:
    """Node 0's drain on ``holder`` polls for two TTLs, renewing its slot at each poll (``clocks`` moved a poll on
    before each), while node 1 asks on ``asker``: node 1 waits all along, node 0's slot held."""
    for _ in range(int(2 * ttl.total_seconds()) // POLL):
        for c in clocks:
            c.advance(POLL)
        assert holder.renew(request(0)).reason is SlotReason.HELD
        assert asker.acquire(request(1)).reason is SlotReason.NO_ROOM


@pytest.mark.parametrize(
    "ttl",
    [
        pytest.param(timedelta(seconds=600), id="default TTL"),
        pytest.param(timedelta(seconds=420), id="TTL under the skew and a third of itself"),
    ],
)
def test_a_drain_on_a_clock_five_minutes_behind_keeps_its_slot_in_the_others_view(
    server: KubeServer, monkeypatch: pytest.MonkeyPatch, ttl: timedelta
) -> None:
    # Given a budget of one slot, shared by a container whose clock runs 5 minutes behind and one on time (with the
    # API server's), and the late container's drain of node 0 holding the slot
    api = core_api(server)
    late_clock, clock = behind_and_on_time(server, monkeypatch)
    late, on_time = budget_of(api, late_clock, ttl), budget_of(api, clock, ttl)
    assert late.acquire(request(0)).granted

    # When its drain polls for two TTLs, renewing its slot at each poll, while node 1 asks on the other container,
    # Then node 1 waits all along: node 0's slot is held
    held_all_along(late, on_time, ttl, late_clock, clock)
    api.api_client.close()


def test_a_release_on_a_clock_five_minutes_behind_whose_answer_is_lost_is_read_back_as_landed(
    server: KubeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the container 5 minutes behind the API server holding the budget's one slot for node 0, node 1 waiting
    config = server.api_client(DRAIN_KEY).configuration
    config.retries = CLIENT_RETRIES  # (the product's: a write whose answer is lost is not sent again)
    api = client.CoreV1Api(client.ApiClient(config))
    late_clock, _ = behind_and_on_time(server, monkeypatch)  # (the API server on time)
    # (the lead each answer tells differs from the last one's by a fraction of a second: the Date is to the second,
    # and the answer's way varies)
    answers = itertools.count()
    late = budget_of(
        api,
        late_clock,
        timedelta(seconds=600),
        wall_clock=lambda: late_clock.now().timestamp() + 0.2 * next(answers),
    )
    assert late.acquire(request(0)).granted
    assert late.acquire(request(1)).reason is SlotReason.NO_ROOM

    # When node 0's slot is given back, and the API server applies the write but its answer is lost
    server.faults.arm([Fault("lost", "kube-lost-response", target="PUT configmaps", limit=1)], seed=1)
    woken = late.release(request(0).node, request(0).record_id, request(0).token)

    # Then its read back finds the document as it wrote it (its stamps told on the API server's clock, read back on
    # its own as they were written): the slot passed on to node 1, whose lifecycle it wakes
    assert [f.kind for f in server.faults.firings()] == ["kube-lost-response"]
    assert woken == [request(1).record_id]
    api.api_client.close()


def test_a_node_asking_on_a_clock_five_minutes_behind_joins_the_line_behind_those_that_asked_before_it(
    server: KubeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the budget's one slot held, and node 1 waiting in line, asked on the container on time
    api = core_api(server)
    late_clock, clock = behind_and_on_time(server, monkeypatch)
    late, on_time = (
        budget_of(api, late_clock, timedelta(seconds=600)),
        budget_of(api, clock, timedelta(seconds=600)),
    )
    assert on_time.acquire(request(0)).granted
    assert on_time.acquire(request(1)).reason is SlotReason.NO_ROOM

    # When node 2 asks a minute later on the container 5 minutes behind
    for c in (late_clock, clock):
        c.advance(60)
    decision = late.acquire(request(2))

    # Then it is second in line, behind node 1 (its place not dated 4 minutes before node 1's)
    assert (decision.reason, decision.position) == (SlotReason.NO_ROOM, 2)
    assert on_time.acquire(request(1)).position == 1
    api.api_client.close()
