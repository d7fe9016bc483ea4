"""A rebalance recommendation's cordon (a cordon without a drain) that finds its node claimed by another lifecycle of
its stack leaves the node to that lifecycle's drain (e0116e4), or waits for a maintenance's drain to let go of it
(45fea60). But a claim may outlive its lifecycle (a release refused or failing, the annotations left to the
sweeper): the cordon then settled as cordoned by a drain that was over, or waited for a release that never came
until its own horizon (a read every BudgetRetrySeconds for hours), the node maybe not cordoned at all.

What tells a claim stale is its lifecycle's record: over (finished, gone, or another lifecycle started over on it).
Its node's cordon alone does not: a drain that goes on cordons its node again at its next poll. But while a claim's
node is not cordoned, the recommendation is not settled as cordoned by it."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from nodecycle.domain.drain.acquire import RecordedLifecycles
from nodecycle.domain.model import LifecycleRecord, Step
from tests.integration.kube.cluster import run_retrying
from tests.support.fakes import T0, InMemoryRecords
from tests.unit.drain.test_drain_steps import (
    NODE,
    REBOOT_AT,
    FakeCluster,
    cordon,
    maintenance,
    node,
    policy,
    spot,
)
from tests.unit.drain.test_slotless_cordon_failing_reads import HORIZON, rebalance

CLAIMERS = {
    "maintenance": lambda step, **changes: maintenance(step, REBOOT_AT, node=NODE, **changes),
    "spot-interruption": lambda step, **changes: spot(step, node=NODE, **changes),
}


def claimed_by(claimer: LifecycleRecord, *, cordoned: bool) -> FakeCluster:
    """Our node as ``claimer``'s claim left it (its annotation names its lifecycle and token)."""
    progress = json.dumps(
        {"instance": claimer.instance_id, "transition": claimer.transition.short, "token": claimer.token}
    )
    claimed = node(owner=claimer.owner, in_progress=progress, unschedulable=cordoned)
    return FakeCluster(nodes={NODE: claimed}, cordoned={NODE} if cordoned else set())


@pytest.mark.parametrize("cordoned", [True, False])
@pytest.mark.parametrize(
    ("kind", "over"),
    [
        ("maintenance", "finished"),
        ("maintenance", "gone"),
        ("maintenance", "started over"),
        ("spot-interruption", "finished"),
        ("spot-interruption", "gone"),
    ],
)
def test_a_rebalance_cordon_takes_over_the_claim_of_a_lifecycle_over(
    kind: str, over: str, cordoned: bool
) -> None:
    # Given our node claimed by a lifecycle of our stack that is over: its record finished, expired, or the next
    # lifecycle started over on it (a new token), the claim left on the node
    claimer = CLAIMERS[kind](Step.EVICT)
    cluster = claimed_by(claimer, cordoned=cordoned)
    records = InMemoryRecords()
    if over == "finished":
        records.create(claimer.model_copy(update={"step": Step.DONE}))
    elif over == "started over":
        records.create(CLAIMERS[kind](Step.ACQUIRE_SLOT, token="token-of-the-next"))
    recommendation = rebalance()
    records.create(recommendation)

    # When the rebalance recommendation's cordon runs, as the engine runs it
    step = cordon(cluster, lifecycles=RecordedLifecycles(records))
    runs, record = run_retrying(step, recommendation, T0 + timedelta(seconds=5), HORIZON)

    # Then it claims the node as its own, cordoned, at once: not settled as cordoned by a drain that is over, nor
    # waiting for a release that never comes
    assert len(runs) == 1, [(at, outcome) for at, outcome in runs]
    _, outcome = runs[0]
    assert not isinstance(outcome, Exception)
    assert (outcome.then, outcome.again, record.outcome) == (None, False, None), outcome
    assert cluster.nodes[NODE].lifecycle == recommendation.id
    assert cluster.nodes[NODE].unschedulable


@pytest.mark.parametrize("kind", list(CLAIMERS))
def test_a_rebalance_cordon_leaves_an_uncordoned_node_to_the_drain_that_goes_on_until_it_cordons_it(
    kind: str,
) -> None:
    # Given our node claimed by a drain of our stack that goes on, uncordoned under it (kubectl uncordon)
    claimer = CLAIMERS[kind](Step.EVICT)
    cluster = claimed_by(claimer, cordoned=False)
    records = InMemoryRecords()
    records.create(claimer)
    recommendation = rebalance()
    records.create(recommendation)
    step = cordon(cluster, lifecycles=RecordedLifecycles(records))

    # When the rebalance recommendation's cordon runs
    now = T0 + timedelta(seconds=5)
    outcome = step(recommendation, now)

    # Then the drain's claim is not taken over (its next poll cordons the node again), but the recommendation is not
    # settled as cordoned by it while nothing cordons the node: it asks again
    assert cluster.nodes[NODE].lifecycle == claimer.id
    assert cluster.patches == []
    assert (outcome.again, outcome.then) == (True, None), outcome
    assert outcome.delay == policy().budget_retry_seconds

    # And once that drain has cordoned the node again, it is left to it as before
    cluster.nodes[NODE] = cluster.nodes[NODE].model_copy(update={"unschedulable": True})
    recommendation = recommendation.model_copy(update=dict(outcome.changes))
    then = step(recommendation, now + timedelta(seconds=outcome.delay))
    if kind == "spot-interruption":
        assert (then.then, then.changes.get("outcome")) == (Step.CLEANUP, "cordoned-by:spot-interruption"), (
            then
        )
    else:  # (a maintenance's drain uncordons its node after the reboot: waited for, see 45fea60)
        assert (then.again, then.then) == (True, None), then
    assert cluster.patches == []
