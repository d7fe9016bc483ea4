"""Intake's own heartbeats (of an action that reached it late; of an action whose claim a lifecycle with a later
start holds) name the group the message named: if Auto Scaling takes a token whatever group is named with it, a
message naming this stack's group with the instance and live token of another stack's action would keep that
action alive. EC2 tells which group an instance is of (``aws:autoscaling:groupName``): intake heartbeats only an
instance of the group named."""

from __future__ import annotations

from collections.abc import Collection

import pytest

from nodecycle.domain.intake import IntakeOutcome
from nodecycle.domain.ports.instances import InstanceFacts, ScheduledEvent
from tests.support.fakes import FakeClock, InMemoryRecords
from tests.unit.foundation.test_intake import GROUP, OneAction, event, intake


class InGroup:
    """EC2 showing every instance in one group (its ``aws:autoscaling:groupName`` tag)."""

    def __init__(self, group: str | None) -> None:
        self.group = group

    def facts(self, instance_id: str) -> InstanceFacts | None:
        return InstanceFacts(instance_id, "running", self.group, {}, spot_request=None)

    def facts_of(self, instance_ids: Collection[str]) -> dict[str, InstanceFacts]:
        return {i: facts for i in instance_ids if (facts := self.facts(i)) is not None}

    def scheduled_events(self, instance_id: str) -> list[ScheduledEvent]:
        return []

    def spot_interruption_noticed(self, spot_request: str) -> bool:
        return False


@pytest.mark.parametrize("group", ["workers-b", None], ids=["another-group", "no-group"])
def test_a_late_action_of_an_instance_of_another_group_is_not_heartbeated_by_intake(
    group: str | None,
) -> None:
    # Given a late message naming this stack's group, with an instance EC2 shows in another group (another
    # stack's) or in none, and a token Auto Scaling takes (the fake takes it whatever the group)
    late = event(age=18)
    autoscaling, records, clock = OneAction(late.token), InMemoryRecords(), FakeClock()

    # When intake accepts it
    outcome = intake(autoscaling, records, clock, instances=InGroup(group)).accept(late)

    # Then its record is written for the engine to confirm (which looks where the instance is), and nothing
    # was heartbeated
    assert outcome is IntakeOutcome.ACCEPTED
    assert autoscaling.heartbeats == []
    (record,) = records.items.values()
    assert (record.heartbeats, record.verified_at) == (0, None)


def test_a_late_action_of_an_instance_of_the_group_named_is_heartbeated() -> None:
    late = event(age=18)
    autoscaling, records, clock = OneAction(late.token), InMemoryRecords(), FakeClock()

    assert (
        intake(autoscaling, records, clock, instances=InGroup(GROUP)).accept(late) is IntakeOutcome.ACCEPTED
    )

    assert autoscaling.heartbeats == [late.action]


def test_a_claim_with_a_later_start_is_not_replaced_by_heartbeating_an_instance_of_another_group() -> None:
    # Given a lifecycle of the instance's action (its claim) taken in from a message dated later than this one
    later = event(age=0, token="5d1b2c3e-4f5a-4b6c-8d9e-0a1b2c3d4e5f")
    autoscaling, records, clock = OneAction(later.token), InMemoryRecords(), FakeClock()
    intake(autoscaling, records, clock, instances=InGroup("workers-b")).accept(later)
    earlier = event(age=5)
    autoscaling.issued[earlier.token] = None

    # When a message naming this stack's group with an instance EC2 shows in another group comes with an
    # earlier start: only a heartbeat of its token could tell that the claim is not its action's
    outcome = intake(autoscaling, records, clock, instances=InGroup("workers-b")).accept(earlier)

    # Then nothing was heartbeated, and it is a duplicate of the claim's lifecycle
    assert autoscaling.heartbeats == []
    assert outcome is IntakeOutcome.DUPLICATE
