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
from datetime import timedelta

import pytest

from nodecycle.domain.model import CARRIED_OVER, LifecycleRecord, Step
from nodecycle.domain.policy import ActionResult
from tests.support.fakes import T0, FakeAutoscaling
from tests.unit.drain.test_drain_steps import (
    INSTANCE,
    NODE,
    FakeCluster,
    FakeSlots,
    cleanup,
    node,
    terminating,
)

OWN = "own-token"  # the token of the action the hook holds the instance by (its event not taken in yet)


def crossed_at_its_cleanup() -> tuple[LifecycleRecord, FakeCluster]:
    """The crossed lifecycle (token ``token``, the other instance's) at its cleanup after its action was found
    gone, its node still claimed and cordoned by it, its drain begun."""
    record = terminating(Step.CLEANUP, node=NODE, drain_started_at=T0, outcome="action-expired")
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
    carried = record.model_copy(update=outcome.changes)
    assert (carried.outcome, carried.extra[CARRIED_OVER], carried.action_open) == (None, record.token, True)
    assert not carried.action.token_known
    assert [heartbeat.token_known for heartbeat in autoscaling.heartbeats] == [False]
    # ... and its completion settles the instance's own action
    assert autoscaling.complete(carried.action, ActionResult.CONTINUE)
    assert [(done.instance_id, done.token) for done, _ in autoscaling.completed] == [(INSTANCE, OWN)]

    # When that lifecycle's action ends too before it completes it (completed by hand), its cleanup cleans up as ever
    over = carried.model_copy(update={"step": Step.CLEANUP, "outcome": "action-expired"})
    again = cleanup(cluster, slots, autoscaling)(over, T0 + timedelta(seconds=120))
    assert again.then is None
    assert (cluster.patches, slots.released) == (
        [{"owner": None, "in_progress": None, "released_for": record.id}],
        [NODE],
    )


@pytest.mark.parametrize("case", ["no-action-held", "node-claimed-since"])
def test_a_lifecycle_whose_action_ended_is_cleaned_up_as_ever_when_the_hook_holds_nothing_for_it(
    case: str,
) -> None:
    # Given a lifecycle at its cleanup after its action was found gone: the instance went on (its action timed
    # out, the hook holds nothing of it), or another lifecycle of the instance has claimed the node since
    record, cluster = crossed_at_its_cleanup()
    if case == "node-claimed-since":
        other = {"instance": INSTANCE, "transition": "terminate", "token": OWN, "started": T0.isoformat()}
        cluster.nodes[NODE] = cluster.nodes[NODE].model_copy(update={"in_progress": json.dumps(other)})
    slots = FakeSlots(holders={NODE})
    autoscaling = holding_the_instance(own=case != "no-action-held")

    # When its cleanup runs
    outcome = cleanup(cluster, slots, autoscaling)(record, T0 + timedelta(seconds=60))

    # Then it ends, as any cleanup: its claim (if still its) cleared, its slot given back, nothing carried over
    assert outcome.then is None
    assert CARRIED_OVER not in outcome.changes.get("extra", {})
    if case == "no-action-held":
        assert cluster.patches == [{"owner": None, "in_progress": None, "released_for": record.id}]
    else:
        assert cluster.patches == []
    assert autoscaling.heartbeats == []  # (none accepted: nothing renewed for the instance)
