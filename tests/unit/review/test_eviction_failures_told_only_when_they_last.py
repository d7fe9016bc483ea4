"""Evictions that fail at every try for EVICTION_FAILING_FOR are told and alarmed (4f7766b); the other way round,
failures with an answer of the pod's own between them (a webhook that flaps, an API server that fails a call now
and then while a PodDisruptionBudget holds the pod) are blips, each starting the pod's time again: neither told nor
alarmed, though they span more than EVICTION_FAILING_FOR in all. And a failure that lasts is told even of a pod
whose block was told before: told once per pod whatever the kind, it was not, the only Event on the pod saying a
PodDisruptionBudget held it."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.drain.evict import EVICTION_FAILING_FOR
from tests.support.fakes import T0, FakeMetrics
from tests.unit.drain.builders import pod
from tests.unit.drain.test_drain_steps import NODE, FakeCluster, FakeEvents, draining, evict, node

FAILS = "503 Service Unavailable: the webhook's pods restart"


def test_failures_with_an_answer_between_them_are_blips_not_told_nor_alarmed() -> None:
    # Given a pod a PodDisruptionBudget without room holds, whose evictions fail now and then
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("web-1")], blocked={"web-1"})
    metrics, events = FakeMetrics(), FakeEvents()
    step = evict(cluster, metrics=metrics, events=events)
    record = draining()
    half = EVICTION_FAILING_FOR * 2 / 3

    # When its evictions fail for most of EVICTION_FAILING_FOR, are answered once (blocked), then fail again
    # for most of it: failures over longer than EVICTION_FAILING_FOR in all, never for so long at a stretch
    for at, failing in ((T0, True), (T0 + half, True), (T0 + half + timedelta(seconds=1), False)):
        cluster.failing = {"web-1": FAILS} if failing else {}
        record = record.model_copy(update=dict(step(record, at).changes))
    again = T0 + half + timedelta(seconds=2)
    cluster.failing = {"web-1": FAILS}
    for at in (again, again + half):
        record = record.model_copy(update=dict(step(record, at).changes))

    # Then the pod's block is told (as ever), but no failure, and nothing is alarmed
    assert [reason for _, reason, _ in events.written if reason != "EvictionBlocked"] == []
    assert metrics.counts.get("EvictionErrors", 0) == 0

    # When it then fails at every try past EVICTION_FAILING_FOR from its last answer
    record = record.model_copy(update=dict(step(record, again + EVICTION_FAILING_FOR).changes))

    # Then it is told and alarmed, though its block was told before (that Event would have the operator look at a
    # PodDisruptionBudget while its evictions fail)
    assert "EvictionFailing" in [reason for _, reason, _ in events.written], events.written
    assert metrics.counts["EvictionErrors"] >= 1
