"""Disruptions without a hook when two stacks share a cluster: an instance is one stack's, never both's."""

from __future__ import annotations

import logging
from collections.abc import Collection
from datetime import timedelta

import pytest

from nodecycle.domain.catalog import LifecycleHooks, ManagedGroups
from nodecycle.domain.intake import Intake, IntakeOutcome
from nodecycle.domain.model import DisruptionEvent, Transition
from nodecycle.domain.policy import PlanPolicy
from nodecycle.domain.ports.instances import InstanceFacts, ScheduledEvent
from tests.support.fakes import T0, FakeAutoscaling, FakeClock, FakeMetrics, InMemoryRecords, RecordingQueues

INSTANCE = "i-0123456789abcdef0"


class OneInstance:
    """EC2 as intake asks it of one running Spot instance of ``group``, carrying ``tags``."""

    def __init__(self, group: str | None, tags: dict[str, str]) -> None:
        self._facts = InstanceFacts(INSTANCE, "running", group, tags, spot_request="sir-0123456789")

    def facts(self, instance_id: str) -> InstanceFacts | None:
        return self._facts if instance_id == INSTANCE else None

    def facts_of(self, instance_ids: Collection[str]) -> dict[str, InstanceFacts]:
        return {i: facts for i in instance_ids if (facts := self.facts(i)) is not None}

    def scheduled_events(self, instance_id: str) -> list[ScheduledEvent]:
        return []

    def spot_interruption_noticed(self, spot_request: str) -> bool:
        return True


def stack(owner: str, names: tuple[str, ...], by_tag: bool, ec2: OneInstance) -> Intake:
    autoscaling, clock = FakeAutoscaling(), FakeClock()
    return Intake(
        owner=owner,
        plan=PlanPolicy(kubernetes=True, eip=False, readiness_gate=True),
        records=InMemoryRecords(),
        queues=RecordingQueues(),
        groups=ManagedGroups(
            owner=owner, names=names, by_tag=by_tag, hooks=("*",), autoscaling=autoscaling, clock=clock
        ),
        hooks=LifecycleHooks(autoscaling, clock),
        autoscaling=autoscaling,
        clock=clock,
        metrics=FakeMetrics(),
        resume_grace=timedelta(seconds=5),
        retry_window=timedelta(seconds=17),
        instances=ec2,
    )


def spot_warning() -> DisruptionEvent:
    return DisruptionEvent(
        instance_id=INSTANCE,
        cause=Transition.SPOT_INTERRUPTION,
        event_id="5d0c7e0a-95b3-4c4c-9d0e-6a2f1b8e7c31",
        happened_at=T0,
        strikes_at=T0 + timedelta(minutes=2),
        delivery="eventbridge",
    )


def test_an_instance_of_a_named_group_tagged_for_another_owner_is_taken_in_by_that_owner_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given stack "team" that names group "nodes", and stack "team-a" that takes the instances carrying its owner
    # tag; one instance of "nodes" carries nodecycle:owner=team-a (a launch template shared with team-a's group)
    ec2 = OneInstance("nodes", {"nodecycle:owner": "team-a"})
    team = stack("team", ("nodes",), False, ec2)
    team_a = stack("team-a", (), True, ec2)

    # When both stacks are told of its Spot interruption
    with caplog.at_level(logging.DEBUG, logger="nodecycle"):
        outcomes = {
            "team": team.accept_disruption(spot_warning()),
            "team-a": team_a.accept_disruption(spot_warning()),
        }

    # Then one stack alone takes it in (two would each drain the node, under two budgets and two policies, the
    # one that lost the node waiting until its own timeout): the owner its tag names, as a group tagged for
    # another owner is that owner's even where this stack names it
    assert outcomes == {"team": IntakeOutcome.UNMANAGED, "team-a": IntakeOutcome.ACCEPTED}
    # (and "team" says why it left the instance of a group it names: not "not of a group this stack manages")
    assert f"ignored: instance {INSTANCE} is tagged for owner team-a" in caplog.text


def test_owner_tags_are_matched_whole_and_case_sensitively() -> None:
    # Given instances of no managed group, tagged for an owner whose id is a prefix, or another case, of ours
    for tag in ("team", "Team-a", "team-a-b", "team-"):
        ec2 = OneInstance(None, {"nodecycle:owner": tag})

        # When stack "team-a" is told of the Spot interruption, Then it is not its own
        outcome = stack("team-a", (), True, ec2).accept_disruption(spot_warning())
        assert outcome is IntakeOutcome.UNMANAGED, tag
    # (and the one tagged for it exactly is)
    ec2 = OneInstance(None, {"nodecycle:owner": "team-a"})
    assert stack("team-a", (), True, ec2).accept_disruption(spot_warning()) is IntakeOutcome.ACCEPTED
