"""A Spot instance's rebalance recommendation told while the drain of a scheduled maintenance of it (a reboot) holds
its node: its cordon (a cordon without a drain) left the node to that drain as cordoned by it, and ended. But that
drain gives the node back uncordoned once the reboot is over and the instance stayed: the instance, still at
elevated risk of interruption, took pods again, and nothing of the recommendation was left to cordon it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.drain.acquire import RecordedLifecycles
from nodecycle.domain.drain.cleanup import MAINTENANCE_OVER_AFTER
from nodecycle.domain.model import Step
from tests.support.fakes import T0, FakeAutoscaling, InMemoryRecords
from tests.unit.drain.test_drain_steps import (
    INSTANCE,
    NODE,
    REBOOT_AT,
    Ec2Maintenance,
    FakeEvents,
    FakeSlots,
    cleanup,
    cordon,
    cordoned_for_maintenance,
    drained_for,
    reboot,
)
from tests.unit.drain.test_slotless_cordon_failing_reads import rebalance


@pytest.mark.parametrize("retried", ["before the maintenance is over", "after it"])
def test_a_rebalance_cordon_outlasts_the_maintenance_drain_that_held_its_node(retried: str) -> None:
    # Given our node cordoned and claimed by the drain for a reboot EC2 does in an hour, its instance in service
    cluster = cordoned_for_maintenance()
    maintenance = drained_for(REBOOT_AT)
    recommendation = rebalance()
    records = InMemoryRecords()
    records.create(maintenance)
    records.create(recommendation)
    lifecycles = RecordedLifecycles(records)
    ec2 = Ec2Maintenance(known={INSTANCE: "running"}, events=[reboot()])
    slots = FakeSlots(holders={NODE}, held_for={NODE: maintenance.id})
    group = FakeAutoscaling(states={INSTANCE: "InService"})
    lift = cleanup(cluster, slots, group, FakeEvents(), ec2)

    # When the rebalance recommendation's cordon runs while that drain holds the node
    now = T0 + timedelta(seconds=5)
    outcome = cordon(cluster, lifecycles=lifecycles)(recommendation, now)
    # And that drain's cleanup runs (it lets go of the node, cordoned until the reboot is over)
    watching = maintenance.model_copy(update=lift(maintenance, T0 + timedelta(minutes=1)).changes)
    after = REBOOT_AT + timedelta(hours=2) + MAINTENANCE_OVER_AFTER + timedelta(seconds=1)
    if retried == "after it":  # (the reboot done, the node Ready again: it lifts what it set)
        ec2.events = []
        assert lift(watching, after).again is False  # (the test's premise: the maintenance's lifecycle ended)
    # And the recommendation's lifecycle runs on, its cordon then its cleanup
    for _ in range(5):
        if not outcome.again:
            break
        recommendation = recommendation.model_copy(update=outcome.changes)
        now = max(now + timedelta(seconds=outcome.delay), T0 + timedelta(minutes=1, seconds=1))
        if retried == "after it":
            now = max(now, after + timedelta(seconds=1))
        outcome = cordon(cluster, lifecycles=lifecycles)(recommendation, now)
    if outcome.then is Step.CLEANUP:
        recommendation = recommendation.model_copy(update={**outcome.changes, "step": Step.CLEANUP})
        cleanup(cluster, FakeSlots(), group, FakeEvents(), ec2)(recommendation, now)
    if retried == "before the maintenance is over":  # (then the maintenance goes by, its lifecycle ending)
        ec2.events = []
        lift(watching, after)

    # Then the node is cordoned still: the recommendation stands until its instance goes
    assert NODE in cluster.cordoned, (outcome, cluster.patches)
