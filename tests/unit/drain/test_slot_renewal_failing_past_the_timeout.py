"""A drain past its timeout whose budget slot cannot be renewed (the budget ConfigMap's reads or writes failing:
an overloaded API server, a 409 storm on the document). Each poll renews the slot before it touches a pod; the
renewal's failure was raised to the engine's retries at every poll, past the drain's timeout too, so the timeout
policy never applied and the action was held until its global timeout (invariant 2), as a drain whose pods cannot
be listed was before it applied the policy on what can be known (see Evict._timed_out_unlisted). Past the timeout,
it ends the same way: continue at once; force after its grace and slack, deleting nothing without its slot."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.budget import SlotDecision, SlotRequest
from nodecycle.domain.drain.evict import FORCED_POD_SLACK
from nodecycle.domain.errors import TransientError
from tests.support.fakes import T0
from tests.unit.drain.builders import pod
from tests.unit.drain.test_drain_steps import NODE, FakeCluster, FakeSlots, evict, node, polled


class FailingRenewals(FakeSlots):
    """The budget whose document can be neither read nor written: every renewal fails as the API server's failure."""

    def renew(self, request: SlotRequest) -> SlotDecision:
        self.requests.append(request)
        raise TransientError("reading the budget ConfigMap: HTTP 500 etcdserver: request timed out")


@pytest.mark.parametrize("timeout_policy", ["continue", "force"])
def test_a_drain_whose_slot_cannot_be_renewed_past_its_timeout_applies_its_timeout_policy(
    timeout_policy: str,
) -> None:
    # Given a drain past its timeout, pods still on its node, whose every renewal of its slot fails
    late = T0 + timedelta(seconds=600)
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("db-0")], now=late)
    step = evict(cluster, FailingRenewals(holders={NODE}), timeout_policy=timeout_policy)

    # When the step runs every 5 s past the timeout (as it is retried, or polls), until it ends the drain
    record, outcome, ended_at = polled(), None, None
    for seconds in range(0, 600, 5):
        now = late + timedelta(seconds=seconds)
        try:
            outcome = step(record, now)
        except TransientError:  # (retried by the engine)
            outcome = None
            continue
        record = record.model_copy(update=dict(outcome.changes))
        if not outcome.again:
            ended_at = now
            break

    # Then the timeout policy ends the drain, the force policy after its grace and slack, without deleting or
    # evicting anything (no disruption without the slot)
    assert outcome is not None
    assert ended_at is not None
    assert not outcome.again
    assert outcome.changes["outcome"] == "drain-timeout-unlisted"
    bound = late + (timedelta(seconds=5) + FORCED_POD_SLACK if timeout_policy == "force" else timedelta(0))
    assert ended_at <= bound + timedelta(seconds=5)
    assert cluster.evictions == []
    assert cluster.deletions == []
