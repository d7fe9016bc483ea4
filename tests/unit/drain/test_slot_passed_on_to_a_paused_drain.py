"""A paused drain (its slot removed) that gets a slot back passed on by another lifecycle's release, through
the real budget: it looks at its instance first, as it does when its own renewal takes the slot back."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.budget import BudgetLimits, DisruptionBudget, SlotReason, SlotRequest
from nodecycle.domain.drain.evict import Evict
from nodecycle.domain.flow import settle_step
from nodecycle.domain.policy import Quantity
from tests.support.fakes import T0, FakeClock, FakeMetrics
from tests.unit.budget.fakes import FakeInventory, MemoryBudgetStore, RecordingMetrics
from tests.unit.drain.builders import no_end, pod
from tests.unit.drain.test_drain_steps import (
    INSTANCE,
    NODE,
    FakeCluster,
    FakeEvents,
    NoDns,
    draining,
    node,
    policy,
    wakes_to_nowhere,
)


def test_a_paused_drain_whose_instance_was_stopped_settles_when_a_release_passes_its_slot_back() -> None:
    # Given a budget of one, and a drain whose slot the stop of its instance freed (FORGET_NODE)
    clock = FakeClock(T0)
    budget = DisruptionBudget(
        store=MemoryBudgetStore(),
        nodes=FakeInventory(),
        clock=clock,
        metrics=RecordingMetrics(),
        limits=BudgetLimits(Quantity.parse("1")),
        holder_ttl=timedelta(seconds=300),
        count_unavailable=False,
        owner="stack-a",
    )
    record = draining()
    assert budget.acquire(_request(NODE, INSTANCE, record.id, record.token)).granted
    budget.forget("stack-a", INSTANCE)
    # and another node that took the slot the stop freed
    other = _request("ip-10-0-2-9.ec2.internal", "i-0other", "i-0other/terminate/tok", "tok")
    assert budget.acquire(other).granted
    cluster = FakeCluster(nodes={NODE: node(owner="stack-a")}, pods=[pod("web-1")])
    step = Evict(
        cluster=cluster,
        slots=budget,
        dispatcher=wakes_to_nowhere(),
        instances=NoDns(known={INSTANCE: "stopped"}),
        policy=policy(),
        metrics=FakeMetrics(),
        events=FakeEvents(),
        time_left=no_end,
    )
    # whose poll found no slot: it paused, waiting in line with precedence
    paused = step(record, clock.now())
    assert paused.changes["drain_paused_at"] == T0
    assert cluster.evictions == []

    # When the other node's release passes the slot on to it, and the paused drain, woken, polls
    clock.advance(5)
    assert budget.release(other.node, other.record_id, other.token) == [record.id]
    assert budget.acquire(_request(NODE, INSTANCE, record.id, record.token)).reason is SlotReason.HELD
    outcome = step(record.model_copy(update={"drain_paused_at": T0}), clock.now())

    # Then it sees its instance stopped (its kubelet gone with it) and settles, rather than ask pods to go that
    # would stay Terminating while it holds the slot
    assert (outcome.then, outcome.changes.get("outcome")) == (settle_step(record), "instance-down")
    assert cluster.evictions == []


def _request(node: str, instance: str, record_id: str, token: str | None) -> SlotRequest:
    return SlotRequest(
        node=node,
        instance_id=instance,
        zone="eu-west-1a",
        owner="stack-a",
        record_id=record_id,
        token=token,
        in_progress=True,
    )
