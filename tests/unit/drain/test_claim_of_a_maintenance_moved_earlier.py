"""A maintenance's lifecycle whose maintenance EC2 now lists earlier (a customer's ModifyInstanceEventStartTime, or
another maintenance of the instance before it) keeps its place and its work under the earlier start, intake's
``_rescheduled``: its record takes the earlier maintenance's event id as its token, in place, while it waits in line
or drains. The claim its cordon put on the node names the token it had then (the in-progress annotation carries it,
and nothing writes it again while the drain goes on).

That claim is still this lifecycle's: read by its token alone (``RecordedLifecycles.over``), it was taken for the
claim of a lifecycle over on the record (an earlier maintenance's, its release given up), and a rebalance
recommendation's cordon of the instance, which leaves a drain's node to that drain, claimed the node over the
maintenance's drain: its cleanup, which follows at once, cleared the drain's annotations under it and marked the
node released for the recommendation, so the maintenance's own cleanup found nothing of its own on the node and its
watch never lifted the cordon after the reboot."""

from __future__ import annotations

import json
from collections.abc import Collection
from datetime import datetime, timedelta

from nodecycle.domain.drain.acquire import RecordedLifecycles
from nodecycle.domain.intake import IntakeOutcome
from nodecycle.domain.model import DisruptionEvent, Step, Transition
from nodecycle.domain.ports.instances import InstanceFacts, ScheduledEvent
from nodecycle.domain.sweep.sweeper import record_over
from tests.support.fakes import T0, FakeAutoscaling, FakeClock, InMemoryRecords
from tests.unit.drain.test_drain_steps import INSTANCE, NODE, FakeCluster, cordon, node
from tests.unit.drain.test_slotless_cordon_failing_reads import rebalance
from tests.unit.foundation.test_intake import GROUP, intake

STARTS = T0 + timedelta(hours=6)  # the maintenance the lifecycle was taken in for
EARLIER = T0 + timedelta(minutes=90)  # the start EC2 lists once it was moved


class MaintainedInstance:
    """EC2 as intake asks it of one running instance of the group, and the maintenance it lists for it."""

    def __init__(self, *starts: datetime) -> None:
        self.starts = starts

    def facts(self, instance_id: str) -> InstanceFacts | None:
        return InstanceFacts(instance_id, "running", GROUP, {}, spot_request=None)

    def facts_of(self, instance_ids: Collection[str]) -> dict[str, InstanceFacts]:
        return {i: facts for i in instance_ids if (facts := self.facts(i)) is not None}

    def scheduled_events(self, instance_id: str) -> list[ScheduledEvent]:
        return [ScheduledEvent(code="system-reboot", not_before=at) for at in self.starts]

    def spot_interruption_noticed(self, spot_request: str) -> bool:
        return False


def reboot(event_id: str, at: datetime) -> DisruptionEvent:
    return DisruptionEvent(
        instance_id=INSTANCE,
        cause=Transition.SCHEDULED_CHANGE,
        event_id=event_id,
        happened_at=T0,
        strikes_at=at,
        code="system-reboot",
        delivery="eventbridge",
    )


def test_a_maintenance_drain_moved_earlier_keeps_its_claim_from_a_rebalance_cordon() -> None:
    # Given a maintenance's lifecycle draining its node, its claim on the node naming its token
    records, clock, ec2 = InMemoryRecords(), FakeClock(), MaintainedInstance(STARTS)
    taking = intake(FakeAutoscaling(), records, clock, instances=ec2)
    assert taking.accept_disruption(reboot("health-event-1", STARTS)) is IntakeOutcome.ACCEPTED
    (draining,) = records.items.values()
    draining = draining.model_copy(update={"step": Step.EVICT, "node": NODE, "drain_started_at": T0})
    records.items[draining.id] = draining
    claim = {"instance": INSTANCE, "transition": "scheduled-change", "token": draining.token}
    cluster = FakeCluster(
        nodes={NODE: node(owner=draining.owner, in_progress=json.dumps(claim), unschedulable=True)},
        cordoned={NODE},
    )
    # And EC2 then lists its maintenance earlier (moved by the customer): intake moves the lifecycle there
    ec2.starts = (EARLIER,)
    assert taking.accept_disruption(reboot("health-event-2", EARLIER)) is IntakeOutcome.ACCEPTED
    moved = records.items[draining.id]
    assert (moved.step, moved.global_deadline) == (Step.EVICT, EARLIER)
    assert cluster.nodes[NODE].lifecycle == moved.id

    # When a rebalance recommendation of the instance is cordoned, its drain going on
    recommendation = rebalance()
    records.create(recommendation)
    outcome = cordon(cluster, lifecycles=RecordedLifecycles(records))(
        recommendation, T0 + timedelta(minutes=5)
    )

    # Then the drain's claim is its own still: not over, not claimed over; the recommendation waits for the
    # maintenance's drain to let go of the node, as for any maintenance's drain
    assert cluster.nodes[NODE].lifecycle == moved.id
    assert cluster.nodes[NODE].progress()["token"] == claim["token"]
    assert cluster.patches == []
    assert (outcome.again, outcome.then) == (True, None), outcome
    # (nor does the sweep of the budget's entries read its entries, written under that token, as over)
    assert not RecordedLifecycles(records).over(moved.id, claim["token"])
    assert not record_over(moved, claim["token"])
