"""The cleanup of a terminate lifecycle taken in from a crossed message: its instance named with another terminating
instance's live token, before that one's own event (which intake then refuses: the token is held). Auto Scaling may
take a call's token alone (AWS does not say it refuses one named with another instance), so the lifecycle was
confirmed, took a slot for its instance's node and cordoned it. When the token's action ended (completed for the other
instance, whose completion names it by its instance), this lifecycle found it gone, its own instance still held by the
hook under its own action: cleaned up as any, it cleared the node's claim and gave the slot back with the node left
cordoned (a node cordoned outside the budget, a claim cleared while the instance's action was open: seed 94). The
hook's action of the instance is what the drain was for after all: the drain goes on for it, named by the instance."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from nodecycle.domain.completion import CompleteAction
from nodecycle.domain.drain.common import RELEASE_FAILING_FOR
from nodecycle.domain.engine import DRAIN_RETRY_CAP_SECONDS, advance
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import CARRIED_OVER, ActionRef, LifecycleRecord, Step, global_deadline
from tests.support.fakes import T0, FakeAutoscaling, FakeMetrics
from tests.unit.drain.test_drain_steps import (
    INSTANCE,
    NODE,
    FakeCluster,
    FakeEvents,
    FakeSlots,
    cleanup,
    evict,
    node,
    policy,
    terminating,
)

OWN = "own-token"  # the token of the action the hook holds the instance by (its event not taken in yet)


def crossed_at_its_cleanup() -> tuple[LifecycleRecord, FakeCluster]:
    """The crossed lifecycle (token ``token``, the other instance's) at its cleanup after its action was found
    gone, its node still claimed and cordoned by it, its drain begun."""
    record = terminating(
        Step.CLEANUP,
        node=NODE,
        drain_started_at=T0,
        drain_deadline=T0 + policy().timeout,
        outcome="action-expired",
    )
    started = {
        "instance": INSTANCE,
        "transition": "terminate",
        "token": record.token,
        "started": T0.isoformat(),
    }
    claimed = node(owner=record.owner, in_progress=json.dumps(started), unschedulable=True)
    return record, FakeCluster(nodes={NODE: claimed}, cordoned={NODE})


def holding_the_instance(own: bool) -> FakeAutoscaling:
    """Auto Scaling, whose terminate hook holds the instance under its own action (``own``), or holds nothing."""
    autoscaling = FakeAutoscaling(issued={})
    if own:
        autoscaling.issue(OWN, INSTANCE, hook=("nodes", "terminate"))
    return autoscaling


def test_a_crossed_lifecycle_whose_token_ended_goes_on_for_the_action_that_holds_its_instance() -> None:
    # Given the crossed lifecycle at its cleanup, holding its node's slot, and the hook holding its instance under
    # the instance's own action
    record, cluster = crossed_at_its_cleanup()
    slots = FakeSlots(holders={NODE})
    autoscaling = holding_the_instance(own=True)

    # When its cleanup runs
    outcome = cleanup(cluster, slots, autoscaling)(record, T0 + timedelta(seconds=60))

    # Then nothing is released: the node keeps its claim and cordon, the slot its holder; the drain goes on, its
    # action named by the instance (the hook's action of it, renewed by that name)
    assert (cluster.patches, slots.released, cluster.cordoned) == ([], [], {NODE})
    assert outcome.then is Step.EVICT
    carried = advance(record, outcome, T0 + timedelta(seconds=60))
    assert (carried.step, carried.outcome, carried.action_open) == (Step.EVICT, None, True)
    assert carried.extra[CARRIED_OVER] == record.token
    assert not carried.action.token_known
    assert [heartbeat.token_known for heartbeat in autoscaling.heartbeats] == [False]

    # When its drain goes on (the node empty by now) and it comes to its completion
    later = T0 + timedelta(seconds=90)
    drained = evict(cluster, slots)(carried, later)
    assert (drained.then, drained.again) == (None, False)
    completing = advance(carried, drained, later)
    assert completing.step is Step.COMPLETE
    completed = CompleteAction(autoscaling, FakeMetrics())(completing, later)

    # Then it settles the instance's own action (named by the instance), and its cleanup ends as any: the claim
    # cleared with the action over, the node kept cordoned (leaving), the slot given back
    assert [(done.instance_id, done.token) for done, _ in autoscaling.completed] == [(INSTANCE, OWN)]
    over = advance(completing, completed, later)
    assert (over.step, over.outcome, over.completed_at) == (Step.CLEANUP, "drained", later)
    assert cleanup(cluster, slots, autoscaling)(over, later).then is None
    assert cluster.patches == [{"owner": None, "in_progress": None, "released_for": record.id}]
    assert (slots.released, cluster.cordoned) == ([NODE], {NODE})


@pytest.mark.parametrize("case", ["no-action-held", "node-claimed-since", "carried-over-before"])
def test_a_lifecycle_whose_action_ended_is_cleaned_up_as_ever_when_nothing_is_left_to_carry_over(
    case: str,
) -> None:
    # Given a lifecycle at its cleanup after its action was found gone: the instance went on (its action timed
    # out, the hook holds nothing of it), or another lifecycle of the instance has claimed the node since, or it
    # was carried over once already
    record, cluster = crossed_at_its_cleanup()
    if case == "node-claimed-since":
        other = {"instance": INSTANCE, "transition": "terminate", "token": OWN, "started": T0.isoformat()}
        cluster.nodes[NODE] = cluster.nodes[NODE].model_copy(update={"in_progress": json.dumps(other)})
    if case == "carried-over-before":  # (and found gone again: once only)
        record = record.model_copy(update={"extra": {CARRIED_OVER: "an-earlier-token"}})
    slots = FakeSlots(holders={NODE})
    autoscaling = holding_the_instance(own=case != "no-action-held")

    # When its cleanup runs
    outcome = cleanup(cluster, slots, autoscaling)(record, T0 + timedelta(seconds=60))

    # Then it ends, as any cleanup: its claim (if still its) cleared, its slot given back, nothing carried over
    assert outcome.then is None
    if case == "node-claimed-since":
        assert cluster.patches == []
    else:
        assert cluster.patches == [{"owner": None, "in_progress": None, "released_for": record.id}]
    assert autoscaling.heartbeats == []  # (none accepted: nothing renewed for the instance)


def test_a_carried_over_lifecycle_is_guarded_by_the_global_timeout_of_the_action_it_goes_on_for() -> None:
    # Given the crossed lifecycle at its cleanup, its global deadline reckoned from its message (T0), and the hook
    # holding its instance under the instance's own action, begun three minutes before (as the group's activity
    # that holds the instance tells: DescribeScalingActivities)
    record, cluster = crossed_at_its_cleanup()
    autoscaling = FakeAutoscaling(issued={})
    began = T0 - timedelta(minutes=3)
    autoscaling.issue(OWN, INSTANCE, at=began, hook=("nodes", "terminate"))

    # When its cleanup carries it over
    now = T0 + timedelta(seconds=60)
    carried = advance(record, cleanup(cluster, FakeSlots(holders={NODE}), autoscaling)(record, now), now)

    # Then it goes on under that action's global timeout, the earlier: Auto Scaling applies the hook's default
    # result then, whatever the drain waits for
    assert carried.extra[CARRIED_OVER] == record.token
    assert (
        carried.global_deadline == global_deadline(began, record.heartbeat_timeout) < record.global_deadline
    )
    assert carried.heartbeat_deadline <= carried.global_deadline


class Undated(FakeAutoscaling):
    """Auto Scaling that lists no activity naming the instance (nothing dates the action the hook holds it by)."""

    def activity_started(self, group: str, instance_id: str, since: datetime) -> datetime | None:
        return None


def test_a_lifecycle_is_not_carried_over_to_an_action_nothing_dates() -> None:
    # Given the crossed lifecycle at its cleanup, the hook holding its instance, but no activity of the group naming
    # the instance (its action's start unknown: a deadline kept from the crossed message may be past Auto Scaling's)
    record, cluster = crossed_at_its_cleanup()
    slots = FakeSlots(holders={NODE})
    autoscaling = Undated(issued={})
    autoscaling.issue(OWN, INSTANCE, hook=("nodes", "terminate"))

    # When its cleanup runs
    outcome = cleanup(cluster, slots, autoscaling)(record, T0 + timedelta(seconds=60))

    # Then it ends as any cleanup (the expiry told, the action left to the sweeper's adoption): claim cleared, slot
    # given back
    assert outcome.then is None
    assert cluster.patches == [{"owner": None, "in_progress": None, "released_for": record.id}]
    assert slots.released == [NODE]


class ThrottledFirst(FakeAutoscaling):
    """Auto Scaling whose first ``throttled`` heartbeats fail as throttled (Rate exceeded, past botocore's
    retries: Auto Scaling's API rate is per account and region, shared by every caller), then answers."""

    def __init__(self, throttled: int, *, own: bool = False) -> None:
        super().__init__(issued={})
        self.throttled = throttled
        if own:  # (the hook holds the instance under its own action)
            self.issue(OWN, INSTANCE, hook=("nodes", "terminate"))

    def heartbeat(self, action: ActionRef) -> bool:
        if self.throttled > 0:
            self.throttled -= 1
            raise TransientError("Throttling: Rate exceeded")
        return super().heartbeat(action)


def test_a_carry_over_question_left_unanswered_does_not_use_up_the_releases_tries() -> None:
    # Given the crossed lifecycle at its cleanup, its token's action ended and the hook holding nothing of its
    # instance, and Auto Scaling throttling the question whether it does for longer than the tries at once
    record, cluster = crossed_at_its_cleanup()
    slots = FakeSlots(holders={NODE})
    autoscaling = ThrottledFirst(throttled=2)
    metrics, events = FakeMetrics(), FakeEvents()
    step = cleanup(cluster, slots, autoscaling, events, metrics=metrics)
    first = T0 + timedelta(seconds=60)
    asked = step(record, first)
    assert asked.again
    record = advance(record, asked, first)

    # When the cleanup gives the question up (cleaned up as ever: a heartbeat timeout without an answer, in which
    # no call of ours renewed the instance's action), and the release's PATCH then meets a node changed since its
    # read (a 409: the node's version moves with every status its kubelet posts)
    cluster.conflicts = 1
    later = first + timedelta(seconds=record.heartbeat_timeout + 2)
    given_up = step(record, later)

    # Then the release is tried again at once, as any release whose PATCH conflicts (RELEASE_FAILING_FOR of tries
    # from its own first failure): not given up as refused at its first failure (the EvictionErrors alarm, a
    # ReleaseRefused event, the claim left on the node) because the question failed for as long before it
    assert given_up.again
    assert metrics.counts["EvictionErrors"] == 0
    assert [reason for _, reason, _ in events.written] == []
    assert slots.released == []

    # ... and its next try releases the node and gives the slot back, told as ever
    record = advance(record, given_up, later)
    done = step(record, later + timedelta(seconds=1))
    assert done.then is None
    assert not done.again
    assert cluster.patches == [{"owner": None, "in_progress": None, "released_for": record.id}]
    assert slots.released == [NODE]
    assert metrics.counts["EvictionErrors"] == 0


def test_a_carry_over_question_throttled_past_the_tries_at_once_keeps_the_slot_and_asks_at_the_drains_pace() -> (
    None
):
    # Given the crossed lifecycle at its cleanup, the hook holding its instance under the instance's own action, and
    # Auto Scaling throttling the question for longer than the tries at once (a rate shared by every caller of the
    # account and region: a refresh's heartbeats and completions)
    record, cluster = crossed_at_its_cleanup()
    slots = FakeSlots(holders={NODE})
    autoscaling = ThrottledFirst(throttled=3, own=True)
    step = cleanup(cluster, slots, autoscaling)
    at = T0 + timedelta(seconds=60)
    record = advance(record, step(record, at), at)

    # When the question is still throttled past RELEASE_FAILING_FOR
    at += RELEASE_FAILING_FOR + timedelta(seconds=2)
    throttled = step(record, at)

    # Then it is asked again at a drain's retry pace, the node's claim and cordon and the slot kept: a question not
    # answered is no answer. Given up, the cleanup cleared the claim and gave the slot back with the node left
    # cordoned while the hook held the instance under its open action (seed 94's node cordoned outside the budget)
    assert throttled.again
    assert throttled.delay == DRAIN_RETRY_CAP_SECONDS
    assert (cluster.patches, slots.released, cluster.cordoned) == ([], [], {NODE})
    record = advance(record, throttled, at)
    at += timedelta(seconds=throttled.delay)
    record = advance(record, step(record, at), at)

    # ... and once Auto Scaling answers, the drain is carried over to the instance's own action, in the slot it held
    at += timedelta(seconds=DRAIN_RETRY_CAP_SECONDS)
    carried = step(record, at)
    assert carried.then is Step.EVICT
    assert (cluster.patches, slots.released, cluster.cordoned) == ([], [], {NODE})
