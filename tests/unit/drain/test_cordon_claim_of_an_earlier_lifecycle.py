"""A lifecycle without a hook (a scheduled maintenance, a Spot interruption) has one record per instance and cause,
and the next one of the instance starts over on it under a token of its own (model.record_id: the token is no part
of such an id). The claim an earlier lifecycle of the record left on the node (its cleanup's release given up: the
API server out or refusing for longer than RELEASE_FAILING_FOR; the sweeper leaves it, as the record's id is open
again) names the same record id, but another token.

Such a claim is not this lifecycle's cordon that landed with its commit lost (drain/cordon.py, ``_cordoned_at`` and
the slot's confirmation): taken for it, the next maintenance's first cordon asked for its slot as a drain in
progress (design invariant 9: precedence over nodes not yet touched, which it has not earned), and its drain was
dated from the earlier lifecycle's cordon, days before: its deadline past at its first poll, its timeout policy
acted at once."""

from __future__ import annotations

import json
from datetime import timedelta

from nodecycle.domain.model import Step
from tests.support.fakes import T0
from tests.unit.drain.test_drain_steps import (
    INSTANCE,
    NODE,
    OWNER,
    FakeCluster,
    FakeSlots,
    cordon,
    maintenance,
    node,
    policy,
)

STARTS = T0 + timedelta(hours=2)  # the next maintenance's start; its drain is due a lead time before it
EARLIER = T0 - timedelta(days=3)  # when the earlier maintenance's lifecycle cordoned the node


def claimed_by_the_earlier_lifecycle() -> FakeCluster:
    """The node as the earlier maintenance's lifecycle left it: cordoned, its claim (token ``earlier``) not cleared."""
    claim = {"instance": INSTANCE, "transition": "scheduled-change", "token": "earlier"}
    progress = json.dumps({**claim, "started": EARLIER.isoformat(), "cordon": True, "lb": False})
    return FakeCluster(nodes={NODE: node(owner=OWNER, in_progress=progress, unschedulable=True)})


def test_the_next_lifecycles_cordon_does_not_ask_as_a_drain_in_progress_for_an_earlier_ones_claim() -> None:
    # Given the next maintenance of the instance at its first cordon, on the record of the earlier one, whose claim
    # is still on the node; its slot lost since its grant, an untouched node of the stack waiting in line
    record = maintenance(Step.CORDON, STARTS, node=NODE, zone="eu-west-1a")
    assert claimed_by_the_earlier_lifecycle().nodes[NODE].lifecycle == record.id  # (the same record id)
    slots = FakeSlots(lost=True, waiters=("rec-untouched",))

    # When its cordon confirms its slot
    outcome = cordon(claimed_by_the_earlier_lifecycle(), slots=slots)(record, T0)

    # Then it asks as the node not yet touched it is, and goes back to the slot's ask, not paused as a drain
    assert not slots.requests[-1].in_progress
    assert outcome.then is Step.ACQUIRE_SLOT, outcome
    assert "drain_paused_at" not in outcome.changes


def test_the_next_lifecycles_drain_is_dated_from_its_own_cordon_not_from_an_earlier_ones_claim() -> None:
    # Given the next maintenance of the instance at its first cordon, its slot held, the earlier one's claim on the
    # node
    record = maintenance(Step.CORDON, STARTS, node=NODE, zone="eu-west-1a")
    slots = FakeSlots(holders={NODE}, held_for={NODE: record.id})

    # When it cordons the node
    outcome = cordon(claimed_by_the_earlier_lifecycle(), slots=slots)(record, T0)

    # Then its drain starts with this cordon, its pods given the whole drain timeout
    assert outcome.changes["drain_started_at"] == T0
    assert outcome.changes["drain_deadline"] == T0 + policy().timeout
