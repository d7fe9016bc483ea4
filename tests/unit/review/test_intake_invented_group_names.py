"""Intake with tag-managed groups: what a flood of messages naming groups this stack does not know costs in
DescribeAutoScalingGroups (the account's Auto Scaling API, which the drains' heartbeats and completions share),
and how soon a group created or tagged since is found."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from types import SimpleNamespace
from typing import Any, cast

import pytest

from nodecycle.domain.catalog import LOOKUP_BURST, LOOKUP_EVERY, LifecycleHooks
from nodecycle.domain.errors import TransientError
from nodecycle.domain.intake import Intake, IntakeOutcome
from nodecycle.domain.model import LifecycleEvent, Transition
from nodecycle.domain.policy import PlanPolicy
from nodecycle.domain.ports.lifecycle import Hook
from nodecycle.wiring.intake import managed_groups
from tests.support.fakes import FakeAutoscaling, FakeClock, FakeMetrics, InMemoryRecords, RecordingQueues

OWNER, OURS, HOOK = "stack-a", "nodes-ours", "terminate"
REDELIVERY = timedelta(seconds=180)  # the intake queue's visibility timeout (template.yaml)
TTL = timedelta(minutes=5)  # ManagedGroups' default: how long an answer about a group is trusted


@dataclass
class CountingAutoscaling(FakeAutoscaling):
    """Auto Scaling that counts DescribeAutoScalingGroups (the port's ``group_tags``)."""

    reads: list[str] = field(default_factory=list)

    def group_tags(self, group: str) -> dict[str, str] | None:
        self.reads.append(group)
        return super().group_tags(group)


def a_stack(
    autoscaling: FakeAutoscaling, clock: FakeClock, *, named: tuple[str, ...] = (), by_tag: bool = True
) -> Intake:
    """A stack of owner OWNER that manages the groups tagged for it (``by_tag``) and those ``named``, as the
    intake function's wiring builds its catalogs of groups and hooks."""
    config = SimpleNamespace(
        owner_id=OWNER, managed_groups=named, managed_by_tag=by_tag, managed_hooks=("*",)
    )
    ports = SimpleNamespace(autoscaling=autoscaling, clock=clock)
    return Intake(
        owner=OWNER,
        plan=PlanPolicy(kubernetes=True, eip=False, readiness_gate=True),
        records=InMemoryRecords(),
        queues=RecordingQueues(),
        groups=managed_groups(cast(Any, config), cast(Any, ports)),
        hooks=LifecycleHooks(autoscaling, clock),
        autoscaling=autoscaling,
        clock=clock,
        metrics=FakeMetrics(),
        resume_grace=timedelta(seconds=5),
        retry_window=timedelta(seconds=17),
    )


def naming(
    group: str, n: int, clock: FakeClock, hook: str = HOOK, transition: Transition = Transition.TERMINATING
) -> LifecycleEvent:
    return LifecycleEvent(
        instance_id=f"i-{n:017x}",
        transition=transition,
        token=f"7b4c5d2e-1f3a-4b6c-8d9e-{n:012x}",
        group=group,
        hook=hook,
        started_at=clock.now(),
        delivery="sqs",
    )


def delivered(intake: Intake, event: LifecycleEvent) -> IntakeOutcome | None:
    """What intake answers a delivery of the event: None when it is retried (sent back to the queue)."""
    try:
        return intake.accept(event)
    except TransientError:
        return None


def ours() -> CountingAutoscaling:
    return CountingAutoscaling(
        tags={OURS: {"nodecycle:owner": OWNER}},
        hooks={(OURS, HOOK): Hook(Transition.TERMINATING, heartbeat_timeout=300)},
    )


def test_messages_naming_one_unknown_group_cost_one_lookup_per_ttl() -> None:
    # Given a tag-managed stack
    autoscaling, clock = ours(), FakeClock()
    intake = a_stack(autoscaling, clock)

    # When 2,000 messages over a minute name the same group Auto Scaling does not have
    for n in range(2000):
        assert intake.accept(naming("invented", n, clock)) is IntakeOutcome.UNMANAGED
        clock.advance(0.03)

    # Then Auto Scaling was asked about it once (its answer remembered for the TTL)
    assert autoscaling.reads == ["invented"]


def test_messages_naming_distinct_unknown_groups_cost_a_bounded_number_of_lookups() -> None:
    # Given a tag-managed stack that has taken in an action of its own group
    autoscaling, clock = ours(), FakeClock()
    intake = a_stack(autoscaling, clock)
    assert intake.accept(naming(OURS, 0, clock)) is IntakeOutcome.ACCEPTED

    # When 2,000 messages over a minute each name another group Auto Scaling does not have (a misconfigured
    # forwarder, a forger)
    autoscaling.reads.clear()
    retried = []
    for n in range(1, 2001):
        # (dropped, or retried: past the bound, named after the listing of this owner's groups was read)
        if (outcome := delivered(intake, told := naming(f"invented-{n}", n, clock))) is None:
            retried.append(told)
        assert outcome in (IntakeOutcome.UNMANAGED, None)
        clock.advance(0.03)

    # Then intake asked Auto Scaling about a burst of them and then one per LOOKUP_EVERY, not one per message
    # (before: 2,000 DescribeAutoScalingGroups in a minute from one container)
    assert len(autoscaling.reads) <= LOOKUP_BURST + 60 / LOOKUP_EVERY.total_seconds() + 1
    # and its own group is still managed at no lookup
    autoscaling.reads.clear()
    assert intake.accept(naming(OURS, 9999, clock)) is IntakeOutcome.ACCEPTED
    assert autoscaling.reads == []
    # and those retried are dropped at their redelivery
    clock.advance(REDELIVERY.total_seconds())
    assert {delivered(intake, told) for told in retried} <= {IntakeOutcome.UNMANAGED}


def test_a_group_created_and_tagged_after_its_name_was_asked_about_is_found_within_the_ttl() -> None:
    # Given a tag-managed stack told of a group Auto Scaling did not have yet (its events came first)
    autoscaling, clock = ours(), FakeClock()
    intake = a_stack(autoscaling, clock)
    assert intake.accept(naming("nodes-new", 1, clock)) is IntakeOutcome.UNMANAGED

    # When the group is created with this stack's tag
    autoscaling.tags["nodes-new"] = {"nodecycle:owner": OWNER}
    autoscaling.hooks[("nodes-new", HOOK)] = Hook(Transition.TERMINATING, heartbeat_timeout=300)

    # Then within the TTL it is not asked about again (the remembered answer), and once the TTL is over it is
    # found and its action taken in
    clock.advance(TTL.total_seconds() - 1)
    assert intake.accept(naming("nodes-new", 2, clock)) is IntakeOutcome.UNMANAGED
    assert autoscaling.reads == ["nodes-new"]
    clock.advance(1)
    assert intake.accept(naming("nodes-new", 3, clock)) is IntakeOutcome.ACCEPTED
    assert autoscaling.reads == ["nodes-new", "nodes-new"]


def test_a_new_group_named_during_a_flood_is_found_once_lookups_are_allowed_again() -> None:
    # Given a tag-managed stack whose lookups of new names a flood has used up
    autoscaling, clock = ours(), FakeClock()
    intake = a_stack(autoscaling, clock)
    for n in range(LOOKUP_BURST + 5):
        intake.accept(naming(f"invented-{n}", n, clock))
    autoscaling.tags["nodes-new"] = {"nodecycle:owner": OWNER}
    autoscaling.hooks[("nodes-new", HOOK)] = Hook(Transition.TERMINATING, heartbeat_timeout=300)

    # When an action of a group created since arrives: it is not looked up (left to the sweeper's adoption)
    autoscaling.reads.clear()
    assert intake.accept(naming("nodes-new", 100, clock)) is IntakeOutcome.UNMANAGED
    assert autoscaling.reads == []

    # Then, not remembered as absent, it is looked up and found as soon as a lookup is allowed again
    clock.advance(LOOKUP_EVERY.total_seconds())
    assert intake.accept(naming("nodes-new", 101, clock)) is IntakeOutcome.ACCEPTED
    assert autoscaling.reads == ["nodes-new"]


@dataclass
class CountingHooks(CountingAutoscaling):
    """Auto Scaling that also counts DescribeLifecycleHooks of one hook (the port's ``hook``)."""

    hook_reads: list[tuple[str, str]] = field(default_factory=list)

    def hook(self, group: str, name: str) -> Hook | None:
        self.hook_reads.append((group, name))
        return super().hook(group, name)


def test_messages_naming_a_hook_this_group_does_not_have_cost_one_lookup_per_ttl() -> None:
    # Given a tag-managed stack whose group has a terminate hook alone
    autoscaling, clock = CountingHooks(tags=ours().tags, hooks=ours().hooks), FakeClock()
    intake = a_stack(autoscaling, clock)

    # When 2,000 messages over a minute name its group with a hook it does not have: each dropped, or retried
    # (dated after the answer here was read: the hook may be new) and dropped at its redelivery
    retried = []
    for n in range(2000):
        if (outcome := delivered(intake, told := naming(OURS, n, clock, hook="launch"))) is None:
            retried.append(told)
        assert outcome in (IntakeOutcome.UNKNOWN_HOOK, None)
        clock.advance(0.03)
    assert len(autoscaling.hook_reads) <= 2
    clock.advance(REDELIVERY.total_seconds())
    assert {delivered(intake, told) for told in retried} <= {IntakeOutcome.UNKNOWN_HOOK}

    # Then Auto Scaling was asked about that hook a few times, not once per message
    assert len(autoscaling.hook_reads) <= 3


def test_messages_naming_a_hook_with_the_wrong_transition_cost_a_bounded_number_of_lookups() -> None:
    # Given a tag-managed stack whose group's hook holds terminations
    autoscaling, clock = CountingHooks(tags=ours().tags, hooks=ours().hooks), FakeClock()
    intake = a_stack(autoscaling, clock)

    # When 2,000 messages over a minute name that hook as a launch (a forged or broken message)
    for n in range(2000):
        told = naming(OURS, n, clock, transition=Transition.LAUNCHING)
        assert delivered(intake, told) in (IntakeOutcome.WRONG_HOOK, None)  # (None: retried)
        clock.advance(0.03)

    # Then Auto Scaling was asked about that hook once, then again (the hook recreated for the other
    # transition?) a burst of times and one per LOOKUP_EVERY, not once per message
    assert len(autoscaling.hook_reads) <= 1 + LOOKUP_BURST + 60 / LOOKUP_EVERY.total_seconds() + 1


def test_a_hook_created_after_its_name_was_asked_about_is_found_within_the_hooks_ttl() -> None:
    # Given a tag-managed stack told of a hook its group did not have yet
    autoscaling, clock = CountingHooks(tags=ours().tags, hooks=ours().hooks), FakeClock()
    intake = a_stack(autoscaling, clock)
    assert intake.accept(naming(OURS, 1, clock, hook="late")) is IntakeOutcome.UNKNOWN_HOOK

    # When the hook is created
    autoscaling.hooks[(OURS, "late")] = Hook(Transition.TERMINATING, heartbeat_timeout=300)

    # Then within the hooks' ttl (a minute) it is not asked about again (an action started since is retried,
    # not dropped: to come back once the answer is past its ttl, its retry_after, here 1 s, which the intake
    # queue honours rather than bring it back sooner to the same answer), and after it, it is found
    clock.advance(59)
    with pytest.raises(TransientError) as retried:
        intake.accept(naming(OURS, 2, clock, hook="late"))
    assert retried.value.retry_after == pytest.approx(1)
    assert autoscaling.hook_reads == [(OURS, "late")]
    clock.advance(1)
    assert intake.accept(naming(OURS, 3, clock, hook="late")) is IntakeOutcome.ACCEPTED
    assert autoscaling.hook_reads == [(OURS, "late"), (OURS, "late")]
