"""A cordon without a slot (a rebalance recommendation's ``cordon`` policy: no budget slot, no eviction, no lifecycle
action) whose node the API server fails to find. The waiters' failing asks are held until the latest a drain could
begin (invariants 9 and 11: a slot's wait is no drain's time, and an action completed undrained terminates its
instance); neither applies here: nothing waits for a slot, and settling a rebalance recommendation completes no
action and terminates nothing (the Spot interruption or the group's hook that may follow drains the node itself).
So it is still given up at its drain timeout. But it asked at every poll, and hundreds of Spot nodes told of a
rebalance at once (a capacity pool's) read a failing API server every 5 s together, no budget bounding their number;
and its events told of a termination, of pods to be evicted and of a lifecycle action completed that it has none of."""

from __future__ import annotations

import itertools
from datetime import timedelta

from nodecycle.domain.drain.acquire import RecordedLifecycles
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import LifecycleRecord, Step, Transition
from nodecycle.domain.ports.cluster import NodeInfo
from tests.integration.kube.cluster import run_retrying
from tests.support.fakes import T0, FakeMetrics, InMemoryRecords
from tests.unit.drain.test_drain_steps import (
    NODE,
    FakeCluster,
    FakeEvents,
    FakeSlots,
    cordon,
    node,
    policy,
    spot,
)

HORIZON = T0 + timedelta(hours=6)  # a rebalance recommendation's record: a horizon, not a deadline
POLL = policy().poll_seconds


class Unfindable(FakeCluster):
    """An API server that fails every read that would find the node (etcd timing out)."""

    def find_node(
        self, instance_id: str, private_dns_name: str | None, *, scan: bool = True
    ) -> NodeInfo | None:
        raise TransientError("500 etcdserver: request timed out")


def rebalance() -> LifecycleRecord:
    return spot(
        Step.CORDON,
        plan=(Step.CORDON, Step.CLEANUP, Step.DONE),
        id="i-0123456789abcdef0/rebalance",
        transition=Transition.REBALANCE,
        global_deadline=HORIZON,
        heartbeat_deadline=HORIZON,
    )


def test_a_slotless_cordon_whose_node_is_unread_backs_off_and_ends_at_its_drain_timeout_told_as_a_cordon() -> (
    None
):
    # Given a rebalance recommendation's cordon, and an API server that fails every read of its node
    events, metrics = FakeEvents(), FakeMetrics()
    step = cordon(Unfindable(nodes={NODE: node()}), events=events, metrics=metrics)

    # When it is run as the engine runs it
    runs, record = run_retrying(step, rebalance(), T0, HORIZON)

    # Then it is given up at its drain timeout (nothing waits for a slot, no action is completed)
    at, last = runs[-1]
    assert not isinstance(last, Exception)
    assert (last.then, last.again) == (Step.CLEANUP, False)
    assert record.outcome == "drain-timeout-cordon-refused"
    assert at - T0 <= policy().timeout + timedelta(seconds=policy().budget_retry_seconds)
    # And meanwhile it reads the failing API server backing off from a poll up to the budget retry, jittered, far
    # fewer times than once a poll (120 in its ten minutes)
    delays = [(later - first).total_seconds() for (first, _), (later, _) in itertools.pairwise(runs)]
    assert len(runs) < policy().timeout.total_seconds() / POLL / 3, delays
    assert all(delay <= policy().budget_retry_seconds for delay in delays), delays
    assert len(set(delays[3:-1])) > len(delays[3:-1]) // 2, delays
    # And its events tell a rebalance recommendation's cordon: no termination, no action completed
    assert [reason for _, reason, _ in events.written] == ["CordonRefused", "DrainTimeout"]
    assert all("rebalance recommendation" in message for message in events.messages), events.messages
    assert not any("termination" in message for message in events.messages), events.messages
    assert not any("lifecycle action" in message for message in events.messages), events.messages


def test_a_slotless_cordon_tells_no_eviction() -> None:
    events = FakeEvents()
    outcome = cordon(FakeCluster(nodes={NODE: node()}), events=events)(rebalance(), T0)
    assert (outcome.then, outcome.again) == (None, False)
    assert [reason for _, reason, _ in events.written] == ["Cordoned"]
    assert "rebalance recommendation" in events.messages[0]
    assert "evicting" not in events.messages[0], events.messages


def test_a_slotless_cordon_leaves_a_node_another_lifecycle_of_its_stack_drains_to_that_drain() -> None:
    # Given the instance's node claimed and cordoned by the drain of its Spot interruption (EC2 may send the
    # rebalance recommendation with the interruption notice; or the recommendation's cordon was retried late)
    cluster = FakeCluster(nodes={NODE: node()})
    records = InMemoryRecords()
    interruption = spot(Step.CORDON, node=NODE, node_uid=node().uid, zone="eu-west-1a")
    recommendation = rebalance()
    records.create(interruption)
    records.create(recommendation)
    lifecycles = RecordedLifecycles(records)
    slots = FakeSlots(holders={NODE}, held_for={NODE: interruption.id})
    assert cordon(cluster, slots=slots, lifecycles=lifecycles)(interruption, T0).then is None
    claimed = cluster.nodes[NODE]

    # When the rebalance recommendation's cordon runs
    events = FakeEvents()
    outcome = cordon(cluster, lifecycles=lifecycles, events=events)(recommendation, T0 + timedelta(seconds=5))

    # Then the node stays that drain's (its cordon is what the recommendation asks): not claimed again, its claim
    # not taken over (the recommendation's cleanup, which follows at once, would clear it under the drain), and
    # the recommendation's lifecycle goes on to its cleanup, nothing of the node its own
    assert cluster.nodes[NODE].lifecycle == interruption.id
    assert cluster.nodes[NODE] == claimed
    assert (outcome.then, outcome.again) == (Step.CLEANUP, False)
    assert outcome.changes["outcome"] == "cordoned-by:spot-interruption"
    assert events.written == []


def test_a_slotless_cordon_whose_patch_conflicts_at_every_turn_backs_off_and_ends_at_its_drain_timeout() -> (
    None
):
    # Given a rebalance recommendation's cordon, and a node whose every PATCH conflicts (a 409 storm)
    events = FakeEvents()
    step = cordon(FakeCluster(nodes={NODE: node()}, conflicts=10**6), events=events)

    # When it is run as the engine runs it
    runs, record = run_retrying(step, rebalance(), T0, HORIZON)

    # Then it backs off past its first poll interval (far fewer tries than a poll's each), told once, and is given
    # up at its drain timeout
    at, last = runs[-1]
    assert not isinstance(last, Exception)
    assert (last.then, record.outcome) == (Step.CLEANUP, "drain-timeout-cordon-refused")
    assert at - T0 <= policy().timeout + timedelta(seconds=policy().budget_retry_seconds)
    assert len(runs) < policy().timeout.total_seconds() / POLL / 3, [r[0] for r in runs]
    assert [reason for _, reason, _ in events.written] == ["CordonRefused", "DrainTimeout"]
