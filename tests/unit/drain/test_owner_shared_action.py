"""One action two stacks take (a group both manage by mistake: same instance, same token): the stack whose
cordon finds the node claimed by the other for that very action must not complete it under the other's drain,
at whatever step it finds that claim. The slot's ask knows it (AcquireSlot); the cordon, which a lifecycle
reaches again after its slot expired (its invocation died for longer than the holder's TTL, and the other stack,
waiting for the node, adopted it), did not."""

from __future__ import annotations

import json
from datetime import timedelta

from nodecycle.domain.model import Step
from tests.support.fakes import T0
from tests.unit.drain.test_drain_steps import NODE, FakeCluster, FakeSlots, acquire, cordon, node, terminating


def test_a_cordon_that_finds_the_other_stack_draining_for_this_very_action_waits_instead_of_completing_it() -> (
    None
):
    # Given this stack's lifecycle at its cordon (its slot taken, then its invocation died past the slot's TTL),
    # and meanwhile the other stack, which took the same action, holding the slot and draining the node for it
    record = terminating(Step.CORDON, node=NODE)
    theirs = json.dumps(
        {
            "instance": record.instance_id,
            "transition": "terminate",
            "token": record.token,
            "started": (T0 + timedelta(seconds=650)).isoformat(),
        }
    )
    cluster = FakeCluster(nodes={NODE: node(owner="stack-b", in_progress=theirs, unschedulable=True)})

    # When this stack's cordon runs again (its message redelivered)
    outcome = cordon(cluster)(record, T0 + timedelta(seconds=700))

    # Then it leaves the node alone and goes back to the slot's ask (which waits for a drain of the action by
    # another stack), rather than settle: the settlement completes the action, and Auto Scaling would terminate
    # the instance under the other stack's drain (invariants 2 and 3)
    assert cluster.patches == []
    assert outcome.then is Step.ACQUIRE_SLOT
    assert outcome.delay > 0
    assert "outcome" not in outcome.changes


def test_a_cordon_that_finds_the_node_claimed_by_another_owner_for_another_action_still_settles() -> None:
    # Given the node claimed by another stack for another lifecycle (its own hook's action, or a disruption)
    record = terminating(Step.CORDON, node=NODE)
    theirs = json.dumps({"instance": record.instance_id, "transition": "terminate", "token": "theirs"})
    cluster = FakeCluster(nodes={NODE: node(owner="stack-b", in_progress=theirs, unschedulable=True)})

    # When the cordon runs, Then this lifecycle's drain ends there, as before: that action is its own to settle
    outcome = cordon(cluster)(record, T0)
    assert cluster.patches == []
    assert (outcome.then, outcome.changes["outcome"]) == (Step.COMPLETE, "node-owned-by:stack-b")


def test_an_adopted_lifecycle_of_an_action_the_other_stack_drains_waits_for_that_drain_instead_of_completing() -> (
    None
):
    # Given this stack's lifecycle adopted by its sweeper (its event lost: token adopted:<hook>, the action named
    # by instance id), and the other stack, which took the same action's event (a group both manage by mistake),
    # draining the node for it under the event's token
    record = terminating(Step.ACQUIRE_SLOT, token="adopted:nodecycle-terminate")
    record = record.model_copy(update={"id": f"{record.instance_id}/terminate/{record.token}"})
    theirs = json.dumps(
        {
            "instance": record.instance_id,
            "transition": "terminate",
            "token": "7b4c5d2e-1f3a-4b6c-8d9e-0a1b2c3d4e5f",
        }
    )
    cluster = FakeCluster(nodes={NODE: node(owner="stack-b", in_progress=theirs, unschedulable=True)})

    # When it asks for its slot after its own drain timeout since it was received
    outcome = acquire(cluster, FakeSlots(others={NODE: "stack-b"}))(record, T0 + timedelta(seconds=601))

    # Then it waits for the other's drain (completing the action by instance id would end it under that drain)
    assert outcome.again
    assert outcome.then is None


def test_a_lifecycle_of_an_action_the_other_stack_drains_as_adopted_waits_for_that_drain_instead_of_completing() -> (
    None
):
    # Given the converse: the other stack adopted the action (its event lost) and drains the node for it under
    # adopted:<hook>; this stack took the action's event
    record = terminating(Step.ACQUIRE_SLOT)
    theirs = json.dumps(
        {"instance": record.instance_id, "transition": "terminate", "token": "adopted:nodecycle-terminate"}
    )
    cluster = FakeCluster(nodes={NODE: node(owner="stack-b", in_progress=theirs, unschedulable=True)})

    # When it asks for its slot after its own drain timeout since it was received, Then it waits for that drain
    outcome = acquire(cluster, FakeSlots(others={NODE: "stack-b"}))(record, T0 + timedelta(seconds=601))
    assert outcome.again
    assert outcome.then is None
