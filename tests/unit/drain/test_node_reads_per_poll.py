"""What the drain's polls read of their node: the whole node (its spec and status are most of its bytes) once,
then its metadata only, for as long as its version says it has not changed; any change (an uncordon, a kubelet
lost, the node registered again) is read whole at the next poll and answered as before."""

from __future__ import annotations

import json
from datetime import timedelta

from nodecycle.domain.model import Step
from tests.support.fakes import T0
from tests.unit.drain.test_drain_steps import NODE, FakeCluster, draining, evict, node, pod

CLAIMED = node(unschedulable=True, owner="stack-a", in_progress=None)


def cluster_with_a_slow_pod() -> FakeCluster:
    """The node, cordoned by the drain (its lifecycle's annotation), with a pod the polls wait for."""
    claimed = draining()
    progress = json.dumps(
        {"instance": claimed.instance_id, "transition": "terminate", "token": claimed.token}
    )
    cordoned = CLAIMED.model_copy(update={"in_progress": progress})
    assert cordoned.lifecycle == claimed.id
    return FakeCluster(nodes={NODE: cordoned}, pods=[pod("web-1")], blocked={"web-1"})


def test_later_polls_of_an_unchanged_node_read_its_metadata_only() -> None:
    # Given a drain waiting for a pod
    cluster = cluster_with_a_slow_pod()
    step = evict(cluster)
    record = draining()

    # When it polls three times
    for second in (0, 1, 3):
        outcome = step(record, T0 + timedelta(seconds=second))
        assert outcome.again
        record = record.model_copy(update=dict(outcome.changes))

    # Then it read the node whole once, then its metadata only
    assert cluster.node_reads == [NODE]
    assert cluster.metadata_reads == [NODE, NODE]


def test_a_node_uncordoned_between_two_polls_is_read_whole_and_cordoned_again() -> None:
    # Given a drain that polled once
    cluster = cluster_with_a_slow_pod()
    step = evict(cluster)
    first = step(draining(), T0)
    record = draining().model_copy(update=dict(first.changes))

    # When someone uncordons the node (its version moves)
    current = cluster.nodes[NODE]
    cluster.nodes[NODE] = current.model_copy(update={"unschedulable": False, "resource_version": "8"})
    outcome = step(record, T0 + timedelta(seconds=1))

    # Then the poll reads it whole and claims it again
    assert cluster.node_reads == [NODE, NODE]
    assert outcome.then is Step.CORDON


def test_a_node_gone_between_two_polls_is_known_gone_from_its_metadata_read() -> None:
    # Given a drain that polled once, and the node deleted since
    cluster = cluster_with_a_slow_pod()
    step = evict(cluster)
    first = step(draining(), T0)
    record = draining().model_copy(update=dict(first.changes))
    del cluster.nodes[NODE]
    cluster.pods = []

    # When it polls again, Then it settles as for a node gone, without reading it whole again
    outcome = step(record, T0 + timedelta(seconds=1))
    assert outcome.changes["outcome"] == "node-gone"
    assert cluster.node_reads == [NODE]


def test_later_polls_list_the_pods_metadata_only_with_the_graces_the_first_list_said() -> None:
    # Given a drain waiting for a pod whose own grace is 45 s, under a grace cap of 60 s
    cluster = cluster_with_a_slow_pod()
    cluster.pods = [pod("web-1", grace_period=45)]
    step = evict(cluster)
    record = draining()

    # When it polls three times, the pod's budget letting it go at the third
    for second in (0, 1, 3):
        if second == 3:
            cluster.blocked.clear()
        outcome = step(record, T0 + timedelta(seconds=second))
        record = record.model_copy(update=dict(outcome.changes))

    # Then it listed them whole once, then their metadata only; and the pod was evicted with its own grace
    assert len(cluster.metadata_lists) == 2
    assert cluster.evictions == [("web-1", 45)]


def test_a_pod_new_on_the_node_has_the_pods_listed_whole_again() -> None:
    # Given a drain that polled once
    cluster = cluster_with_a_slow_pod()
    step = evict(cluster)
    first = step(draining(), T0)
    record = draining().model_copy(update=dict(first.changes))

    # When a pod the drain never listed is on the node (its grace unknown), and it polls
    cluster.pods.append(pod("late", grace_period=20))
    step(record, T0 + timedelta(seconds=1))

    # Then it lists them whole again, and asks the new one with its own grace
    assert ("late", 20) in cluster.evictions
