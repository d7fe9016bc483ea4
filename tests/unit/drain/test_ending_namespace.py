"""Pods of a namespace being deleted, where the API server takes no eviction (403, cause NamespaceTerminating): its
namespace controller deletes them. The drain neither alarms nor tells of them, asks none of that namespace's pods
again, evicts the node's other pods, and applies its timeout policy to them on time."""

from __future__ import annotations

from datetime import timedelta

from tests.support.fakes import T0, FakeMetrics
from tests.unit.drain.test_drain_steps import NODE, FakeCluster, FakeEvents, draining, evict, node, pod


def test_pods_of_a_namespace_being_deleted_are_waited_for_then_forced_at_the_deadline() -> None:
    # Given a node with two pods of a namespace being deleted and one of another namespace
    ending = [pod("old-1", namespace="gone"), pod("old-2", namespace="gone")]
    cluster = FakeCluster(nodes={NODE: node()}, pods=[*ending, pod("web-1")], ending_namespaces={"gone"})
    metrics, events = FakeMetrics(), FakeEvents()
    step = evict(cluster, metrics=metrics, events=events)

    # When the drain polls twice, then at its deadline
    first = step(draining(), T0)
    record = draining().model_copy(update=dict(first.changes))
    second = step(record, T0 + timedelta(seconds=1))
    record = record.model_copy(update=dict(second.changes))
    at_deadline = step(record, T0 + timedelta(seconds=600))

    # Then the other pod is evicted; the namespace's pods are neither an alarm nor told, nor asked again
    assert cluster.evictions == [("web-1", 60)]
    assert "EvictionErrors" not in metrics.counts
    assert [reason for _, reason, _ in events.written if reason.startswith("Eviction")] == []
    assert first.changes["extra"]["ending_namespaces"] == ["gone"]
    # and at the deadline the force policy deletes them (a delete is taken there)
    assert at_deadline.changes["forced_at"] == T0 + timedelta(seconds=600)
    assert sorted(name for name, _ in cluster.deletions) == ["old-1", "old-2"]
