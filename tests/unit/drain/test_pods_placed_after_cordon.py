"""Pods placed on the node after its cordon (they tolerate the node.kubernetes.io/unschedulable taint, or a controller
binds them by spec.nodeName), as the drain's steps meet them: the drain evicts and waits for the pods that were on the
node when it was cordoned, as kubectl drain does for those it listed at its start; a pod created later than the cordon
(the taint's timeAdded, the API server's clock, by more than PLACED_AFTER_MARGIN) is neither evicted nor waited for,
nor deleted by the timeout policy, but counted and told on the node once. (Pod selection: test_pod_filters.py; on the
sandbox API server, whose scheduler places such pods back on the node: tests/integration/kube/
test_kube_drain_pods_tolerating_the_cordon.py.)"""

from __future__ import annotations

import json
from datetime import timedelta

from nodecycle.domain.drain.pods import FIRST_LISTED, PLACED_AFTER, PLACED_AFTER_MARGIN
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import LifecycleRecord
from tests.support.fakes import T0, FakeMetrics
from tests.unit.drain.test_drain_steps import NODE, FakeCluster, FakeEvents, draining, evict, node, pod

CORDON = T0  # the drain's cordon, as the node lifecycle controller stamped its taint
BEFORE = CORDON - timedelta(hours=3)
AFTER = CORDON + PLACED_AFTER_MARGIN + timedelta(seconds=2)


def cordoned(**changes: object) -> FakeCluster:
    """NODE cordoned at CORDON (its unschedulable taint's time), with ``changes`` to the cluster."""
    return FakeCluster(nodes={NODE: node(unschedulable=True, cordoned_at=CORDON)}, **changes)  # type: ignore[arg-type]


def then(record: LifecycleRecord, outcome: Outcome) -> LifecycleRecord:
    return record.model_copy(update=dict(outcome.changes))


def placed_events(events: FakeEvents) -> list[tuple[tuple[str, str, str], str]]:
    return [
        (w, m)
        for w, m in zip(events.written, events.messages, strict=True)
        if w[1] == "PodsPlacedAfterCordon"
    ]


def test_a_pod_placed_after_the_cordon_is_not_evicted_nor_waited_for_and_is_told_once() -> None:
    # Given a node cordoned with a web pod there before, and a drain that asked it to leave
    cluster = cordoned(pods=[pod("web-1", created_at=BEFORE)])
    metrics, events = FakeMetrics(), FakeEvents()
    step = evict(cluster, metrics=metrics, events=events)
    at = CORDON + timedelta(seconds=1)
    first = step(draining(), at)
    record = then(draining(), first)

    # When an agent is placed on the node after the cordon, the drain polls, the web pod then goes, and the drain
    # polls again
    cluster.pods.append(pod("agent-2", created_at=AFTER))
    polled = step(record, AFTER)
    record = then(record, polled)
    cluster.pods = [p for p in cluster.pods if p.name != "web-1"]
    second = step(record, AFTER + timedelta(seconds=1))
    record = then(record, second)

    # Then the web pod alone was evicted, and the drain ended drained once it was gone, the agent still on the node
    assert cluster.evictions == [("web-1", 60)]
    assert (first.again, polled.again) == (True, True)
    assert (second.then, second.again) == (None, False)
    assert record.outcome == "drained"
    assert [p.name for p in cluster.pods] == ["agent-2"]
    assert cluster.deletions == []
    # and the agent was counted and told on the node once, as a warning naming it and what becomes of it
    assert metrics.counts["PodsPlacedAfterCordon"] == 1
    told = placed_events(events)
    assert [w for w, _ in told] == [(NODE, "PodsPlacedAfterCordon", "Warning")]
    assert "apps/agent-2" in told[0][1]
    assert "not evicted nor waited for" in told[0][1]
    assert record.extra[PLACED_AFTER] == ["uid-agent-2"]


def test_the_timeout_policy_forces_the_pods_of_the_cordon_never_those_placed_after_it() -> None:
    # Given a node cordoned with a web pod a budget protects, and a drain that asked it to leave
    cluster = cordoned(pods=[pod("web-1", created_at=BEFORE)], blocked={"web-1"})
    step = evict(cluster, timeout_policy="force")
    record = then(draining(), step(draining(), CORDON + timedelta(seconds=1)))

    # When an agent is placed on the node after the cordon, and the drain polls at its deadline
    cluster.pods.append(pod("agent-2", created_at=AFTER))
    at_deadline = step(record, CORDON + timedelta(seconds=600))

    # Then the force policy deletes the web pod, not the agent
    assert at_deadline.changes["forced_at"] == CORDON + timedelta(seconds=600)
    assert cluster.deletions == [("web-1", 5)]
    assert cluster.evictions == []


def test_a_drain_retried_from_its_message_tells_the_pods_apart_as_the_run_before_from_the_record() -> None:
    # Given a node an operator cordoned an hour before the drain (its taint stamped then), with a pod placed there
    # since (it tolerates the cordon), there when the drain first lists the pods
    cluster = FakeCluster(
        nodes={NODE: node(unschedulable=True, cordoned_at=CORDON - timedelta(hours=1))},
        pods=[pod("ops-1", created_at=CORDON - timedelta(minutes=30))],
    )
    metrics = FakeMetrics()
    first = evict(cluster, metrics=metrics)(draining(), CORDON)
    record = then(draining(), first)
    assert record.extra[FIRST_LISTED] == (CORDON - timedelta(minutes=30)).isoformat()

    # When the pod evicted is replaced on the node, and the drain's next poll runs in another container (a new
    # step, nothing in memory), the evicted pod being deleted and its replacement both there
    evicted = cluster.pods[0]
    cluster.pods = [evicted, pod("ops-1b", created_at=CORDON + timedelta(seconds=1))]
    again = evict(cluster, metrics=metrics)(record, CORDON + timedelta(seconds=1))

    # Then the pod there at the drain's start was evicted and is waited for; its replacement is neither
    assert cluster.evictions == [("ops-1", 60)]
    assert again.again
    assert metrics.counts["PodsPlacedAfterCordon"] == 1
    # and once the pod of the drain's start is gone, the drain ends
    cluster.pods = cluster.pods[1:]
    last = evict(cluster, metrics=metrics)(then(record, again), CORDON + timedelta(seconds=2))
    assert (last.then, last.again) == (None, False)
    assert metrics.counts["PodsPlacedAfterCordon"] == 1


def test_without_the_cordons_time_every_pod_is_waited_for_as_before() -> None:
    # Given a node cordoned whose unschedulable taint has no time (the node lifecycle controller has not stamped it)
    cluster = FakeCluster(
        nodes={NODE: node(unschedulable=True)},
        pods=[pod("web-1", created_at=BEFORE), pod("agent-2", created_at=AFTER)],
    )
    metrics = FakeMetrics()

    # When the drain polls
    outcome = evict(cluster, metrics=metrics)(draining(), CORDON + timedelta(seconds=10))

    # Then both pods are evicted and waited for
    assert cluster.evictions == [("web-1", 60), ("agent-2", 60)]
    assert outcome.again
    assert "PodsPlacedAfterCordon" not in metrics.counts


def test_a_cordon_undone_and_done_again_makes_the_pods_placed_meanwhile_the_drains() -> None:
    # Given a drain whose node was uncordoned by someone after its first poll, a web pod scheduled there meanwhile
    # (no toleration needed), the taint still there with its first time (the controller did not look in between)
    cluster = cordoned(pods=[pod("web-1", created_at=BEFORE)])
    step = evict(cluster)
    record = then(draining(), step(draining(), CORDON + timedelta(seconds=1)))
    cluster.pods = [pod("web-2", created_at=CORDON + timedelta(minutes=1))]
    cluster.nodes[NODE] = cluster.nodes[NODE].model_copy(update={"unschedulable": False})

    # When the drain's poll finds its cordon undone (it claimed the node: its lifecycle on it), and after the
    # cordon done again polls once more
    claimed = cluster.nodes[NODE].model_copy(update={"in_progress": _in_progress(record)})
    cluster.nodes[NODE] = claimed
    back = step(record, CORDON + timedelta(minutes=2))
    record = then(record, back)
    cluster.nodes[NODE] = claimed.model_copy(update={"unschedulable": True, "resource_version": "9"})
    step(record, CORDON + timedelta(minutes=2, seconds=1))

    # Then the drain went back to its cordon, forgetting what its first list said, and evicts the pod placed there
    # while it was undone
    assert FIRST_LISTED not in record.extra
    assert cluster.evictions == [("web-1", 60), ("web-2", 60)]


def _in_progress(record: LifecycleRecord) -> str:
    """The in-progress annotation of the drain's claim, as its cordon wrote it."""
    return json.dumps(
        {"instance": record.instance_id, "transition": record.transition.short, "token": record.token}
    )
