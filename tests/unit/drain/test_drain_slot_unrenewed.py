"""A drain refused before it renews its budget slot (the renewal refused, or its node's read): once a holder TTL has
passed since the first of those refusals in a row, its holder has expired and its slot may be another node's, so it
waits for a slot as a drain paused for a lost slot does, the wait not drain time (invariant 9). Never sooner: the time
its slot was still its own (renewed, or not yet expired) is drain time, or it would hold the slot past its timeout
(invariant 10)."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.model import LifecycleRecord, Step
from tests.support.fakes import T0
from tests.unit.drain.test_drain_steps import (
    NODE,
    FakeCluster,
    FakeSlots,
    evict,
    node,
    pod,
    policy,
    polled,
)

WHY = 'configmaps "nodecycle-budget" is forbidden: User "drain" cannot get resource "configmaps"'
DEADLINE = T0 + timedelta(seconds=900)  # the drain's deadline: later than its slot's expiry, 605 s in


def drain() -> LifecycleRecord:
    return polled().model_copy(update={"drain_deadline": DEADLINE})


def test_a_drain_refused_its_renewal_for_a_holder_ttl_waits_for_a_slot_past_its_deadline() -> None:
    # Given a drain whose budget slot RBAC has refused to renew since 5 s in
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("web-1")])
    slots = FakeSlots(holders={NODE}, refused=WHY)
    first = evict(cluster, slots=slots)(drain(), T0 + timedelta(seconds=5))
    record = drain().model_copy(update=dict(first.changes))

    # When it polls 100 s past its deadline, still refused
    outcome = evict(cluster, slots=slots)(record, DEADLINE + timedelta(seconds=100))

    # Then it polls on, paused since its holder expired (a holder TTL after the first refusal), evicting nothing
    assert outcome.again, outcome
    assert outcome.changes["drain_paused_at"] == T0 + timedelta(seconds=5) + policy().holder_ttl
    assert outcome.delay == policy().budget_retry_seconds  # (asking again as a waiter does, not at each poll)
    assert cluster.evictions == []


def test_a_drain_refused_again_after_renewing_its_slot_dates_the_slot_s_end_from_the_new_refusal() -> None:
    # Given a drain refused its slot's renewal 5 s in, whose renewals then went through again (700 s in)
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("web-1")])
    slots = FakeSlots(holders={NODE}, refused=WHY)
    first = evict(cluster, slots=slots)(drain(), T0 + timedelta(seconds=5))
    record = drain().model_copy(update=dict(first.changes))
    slots.refused = None
    renewed = evict(cluster, slots=slots)(record, T0 + timedelta(seconds=700))
    record = record.model_copy(update=dict(renewed.changes))

    # When its renewal is refused again at its deadline, long past a holder TTL after the first refusal
    slots.refused = WHY
    outcome = evict(cluster, slots=slots)(record, DEADLINE)

    # Then it times out there: its slot, renewed 200 s ago, is still its own, and the time it held it drain time
    assert (outcome.then, outcome.changes["outcome"]) == (Step.COMPLETE, "drain-timeout-reads-refused")


def test_a_drain_refused_the_list_of_its_pods_after_renewing_its_slot_times_out_at_its_deadline() -> None:
    # Given a drain whose pods RBAC has refused to list since 5 s in, its slot renewed at every poll before the list
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("web-1")], pods_refused=WHY)
    slots = FakeSlots(holders={NODE})
    first = evict(cluster, slots=slots)(drain(), T0 + timedelta(seconds=5))
    record = drain().model_copy(update=dict(first.changes))

    # When it polls at its deadline, a holder TTL and more after the first refusal, still refused
    outcome = evict(cluster, slots=slots)(record, DEADLINE)

    # Then it times out there: its slot was its own all along (invariant 10)
    assert (outcome.then, outcome.changes["outcome"]) == (Step.COMPLETE, "drain-timeout-reads-refused")


def test_a_paused_drain_whose_slot_is_back_ends_its_pause_though_the_list_of_its_pods_is_refused() -> None:
    # Given a drain paused for its lost slot 100 s into its 600 s, whose slot is back, its pods RBAC refuses to list
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("web-1")], pods_refused=WHY)
    paused = polled(drain_paused_at=T0 + timedelta(seconds=100))

    # When it polls 650 s in, and again at its deadline as moved by its 550 s pause
    outcome = evict(cluster)(paused, T0 + timedelta(seconds=650))
    record = paused.model_copy(update=dict(outcome.changes))
    at = evict(cluster)(record, T0 + timedelta(seconds=1150))

    # Then its pause ended there (its slot held again, its drain time running), and it times out at that deadline
    # rather than waiting on, its slot held, up to its deadline's cap (invariant 10)
    assert outcome.again
    assert (record.drain_paused_at, record.drain_deadline) == (None, T0 + timedelta(seconds=1150))
    assert (at.then, at.changes["outcome"]) == (Step.COMPLETE, "drain-timeout-reads-refused")
