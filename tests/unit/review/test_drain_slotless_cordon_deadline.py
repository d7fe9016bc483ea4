"""A cordon without a slot (a rebalance recommendation's) that the API server keeps failing backs off from a poll up
to the waiters' cadence, bounded by its drain deadline, where it is given up. The bound was then undone by taking a
poll's floor again: within a poll of the deadline it waited a whole poll, and was given up up to a poll late."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.drain.cordon import CORDON_FAILING, CORDON_REFUSED
from tests.support.fakes import T0
from tests.unit.drain.test_drain_steps import NODE, FakeEvents, cordon, node, policy
from tests.unit.drain.test_slotless_cordon_failing_reads import Unfindable, rebalance


def test_a_failing_slotless_cordon_near_its_deadline_asks_again_no_later_than_the_deadline() -> None:
    # Given a rebalance recommendation's cordon whose node reads have failed since T0 (told already)
    failing = rebalance().model_copy(
        update={"extra": {CORDON_FAILING: T0.isoformat(), CORDON_REFUSED: T0.isoformat()}}
    )
    deadline = T0 + policy().timeout
    step = cordon(Unfindable(nodes={NODE: node()}), events=FakeEvents())

    # When it fails again two seconds before its drain deadline (a poll is five)
    now = deadline - timedelta(seconds=2)
    outcome = step(failing, now)

    # Then it asks again at the deadline, where it is given up, not a poll later
    assert outcome.again, outcome
    assert now + timedelta(seconds=outcome.delay) <= deadline, outcome.delay
    last = step(failing.model_copy(update=dict(outcome.changes)), deadline)
    assert (last.again, last.changes.get("outcome")) == (False, "drain-timeout-cordon-refused")
