"""Intake with tag-managed groups under a flood of messages naming invented groups (anyone allowed to send to
the intake queue can send them): the lookups of names not known here are bounded (catalog.LOOKUP_BURST), and
an action of a group of this stack's that the flood left no lookup for is not dropped as unmanaged for it: the
groups tagged for this owner are listed instead."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

import pytest

from nodecycle.adapters.aws.autoscaling import AutoscalingActions
from nodecycle.domain.catalog import LIST_EVERY, LOOKUP_BURST, LOOKUP_EVERY, OWNER_TAG
from nodecycle.domain.errors import AccessRefused, TransientError
from nodecycle.domain.intake import Intake, IntakeOutcome
from nodecycle.domain.model import LifecycleEvent, Transition
from nodecycle.domain.ports.lifecycle import Hook
from nodecycle_sandbox.aws.group import AutoScalingGroup, GroupSpec
from tests.sandbox.aws.conftest import REGION, Emulation, aws  # noqa: F401  (the emulation in process)
from tests.support.fakes import FakeAutoscaling, FakeClock
from tests.unit.review.test_intake_invented_group_names import a_stack

OWNER, HOOK = "stack-a", "terminate"
REDELIVERY = timedelta(seconds=180)  # the intake queue's visibility timeout (template.yaml)


@dataclass
class CountingAutoscaling(FakeAutoscaling):
    """Auto Scaling that counts DescribeAutoScalingGroups: by name (``group_tags``) and by this owner's tag."""

    reads: list[str] = field(default_factory=list)

    def group_tags(self, group: str) -> dict[str, str] | None:
        self.reads.append(group)
        return super().group_tags(group)

    def groups_tagged(self, owner: str) -> frozenset[str]:
        self.reads.append(f"tag:{owner}")
        return super().groups_tagged(owner)


def naming(group: str, n: int, clock: FakeClock, ago: float = 0) -> LifecycleEvent:
    return LifecycleEvent(
        instance_id=f"i-{n:017x}",
        transition=Transition.TERMINATING,
        token=f"7b4c5d2e-1f3a-4b6c-8d9e-{n:012x}",
        group=group,
        hook=HOOK,
        started_at=clock.now() - timedelta(seconds=ago),
        delivery="sqs",
    )


def created(autoscaling: CountingAutoscaling, group: str) -> None:
    autoscaling.tags[group] = {OWNER_TAG: OWNER}
    autoscaling.hooks[(group, HOOK)] = Hook(Transition.TERMINATING, heartbeat_timeout=300)


def flooded(intake: Intake, clock: FakeClock, seconds: int, per_second: int = 30) -> list[LifecycleEvent]:
    """Messages naming invented groups, each another, for ``seconds``: each dropped as unmanaged, or retried (dated
    after the listing of this owner's groups was read: see LIST_EVERY); the retried ones."""
    retried: list[LifecycleEvent] = []
    for n in range(seconds * per_second):
        dropped_or_retried(intake, naming(f"invented-{clock.now().timestamp()}", n, clock), retried)
        clock.advance(1 / per_second)
    return retried


def dropped_or_retried(intake: Intake, event: LifecycleEvent, retried: list[LifecycleEvent]) -> None:
    """A message naming an invented group offered to intake: dropped as unmanaged, or retried (then in
    ``retried``)."""
    outcome = offered(intake, event)
    if outcome is None:
        retried.append(event)
    else:
        assert outcome is IntakeOutcome.UNMANAGED


@pytest.fixture
def stack() -> tuple[CountingAutoscaling, FakeClock, Intake]:
    autoscaling, clock = CountingAutoscaling(), FakeClock()
    return autoscaling, clock, a_stack(autoscaling, clock)


def test_an_action_of_a_new_group_of_this_stack_during_a_flood_is_taken_in_not_dropped(
    stack: tuple[CountingAutoscaling, FakeClock, Intake],
) -> None:
    # Given a tag-managed stack whose lookups of names not known here a flood of invented names has used up,
    # and a group created for it meanwhile (tagged at its creation)
    autoscaling, clock, intake = stack
    flooded(intake, clock, seconds=5)
    created(autoscaling, "nodes-new")

    # When, the flood going on, an action of the group's first instance starts (seconds after the group: its
    # instance launched) and its event comes
    flooded(intake, clock, seconds=10)
    event = naming("nodes-new", 100_000, clock)
    outcome = offered(intake, event)
    if outcome is None:  # (retried: the listing was read before its action started, and not again since)
        flooded(intake, clock, seconds=LIST_EVERY.seconds)
        outcome = offered(intake, event)

    # Then it is taken in at its first delivery or its redelivery, at no lookup of its name (before: dropped as
    # unmanaged, its action left to the sweeper's adoption minutes later, whatever its delivery's retries)
    assert outcome is IntakeOutcome.ACCEPTED
    assert "nodes-new" not in autoscaling.reads


def test_a_flood_of_invented_names_costs_a_bounded_number_of_reads(
    stack: tuple[CountingAutoscaling, FakeClock, Intake],
) -> None:
    # Given a tag-managed stack with a group of its own
    autoscaling, clock, intake = stack
    created(autoscaling, "nodes-ours")
    assert intake.accept(naming("nodes-ours", 1_000_000, clock)) is IntakeOutcome.ACCEPTED

    # When a minute of messages each names another group Auto Scaling does not have
    autoscaling.reads.clear()
    flooded(intake, clock, seconds=60)

    # Then Auto Scaling was read a burst and then one name and one listing of this owner's groups per
    # LOOKUP_EVERY at most, not once per message (1,800)
    per_minute = 60 / LOOKUP_EVERY.total_seconds()
    by_name = [read for read in autoscaling.reads if not read.startswith("tag:")]
    assert len(by_name) <= LOOKUP_BURST + per_minute + 1
    assert len(autoscaling.reads) - len(by_name) <= per_minute + 1


def test_the_listing_names_the_groups_tagged_for_the_owner_alone(aws: Emulation) -> None:  # noqa: F811
    # Given groups tagged for this owner, for another, and not at all, on moto
    for name, tags in (
        ("ours-a", {OWNER_TAG: OWNER}),
        ("ours-b", {OWNER_TAG: OWNER}),
        ("theirs", {OWNER_TAG: "b"}),
    ):
        AutoScalingGroup(
            autoscaling=aws.autoscaling, ec2=aws.ec2, control=aws.control, region=REGION, name=name
        ).create(GroupSpec(name=name, size=0, hooks=(), tags=tags))
    aws.group()  # ("workers", untagged)

    # When the adapter lists this owner's groups, Then it names those tagged for it
    assert AutoscalingActions(aws.autoscaling).groups_tagged(OWNER) == {"ours-a", "ours-b"}


@dataclass
class ThrottledListing(CountingAutoscaling):
    listing_fails: bool = True

    def groups_tagged(self, owner: str) -> frozenset[str]:
        if not self.listing_fails:
            return super().groups_tagged(owner)
        self.reads.append(f"tag:{owner}")
        raise TransientError("listing the groups tagged for this owner: Rate exceeded")


def test_a_throttled_listing_is_asked_again_only_after_list_every() -> None:
    # Given a tag-managed stack whose lookups a flood has used up, Auto Scaling throttling the listing
    autoscaling, clock = ThrottledListing(), FakeClock()
    intake = a_stack(autoscaling, clock)
    for n in range(LOOKUP_BURST):
        intake.accept(naming(f"invented-{n}", n, clock))
    autoscaling.reads.clear()

    # When names not known here keep coming: the one that asked is retried (its event's delivery), and so are the
    # others within LIST_EVERY, without a call (before: dropped as unmanaged, a new group's first event with them)
    with pytest.raises(TransientError, match="Rate exceeded"):
        intake.accept(naming("invented-x", 1000, clock))
    for n in range(1001, 1100):
        with pytest.raises(TransientError, match="Rate exceeded"):
            intake.accept(naming(f"invented-{n}", n, clock))

    # Then the listing was asked once
    assert autoscaling.reads == [f"tag:{OWNER}"]


def test_a_group_named_here_but_tagged_for_another_stack_is_left_to_it_during_a_flood() -> None:
    # Given a stack that manages a group by name, which is tagged for another stack (left to it: two stacks
    # would take the same actions), and a flood of invented names that used the lookups up
    autoscaling, clock = CountingAutoscaling(), FakeClock()
    intake = a_stack(autoscaling, clock, named=("nodes-named",))
    created(autoscaling, "nodes-named")
    autoscaling.tags["nodes-named"] = {OWNER_TAG: "stack-b"}
    flooded(intake, clock, seconds=5)

    # When its first event comes in the flood, Then it is left to that stack (before: the listing of this
    # owner's groups, which lacks it, was taken to say it is untagged, and so this stack's by its name)
    assert intake.accept(naming("nodes-named", 100_000, clock)) is IntakeOutcome.UNMANAGED
    assert "nodes-named" in autoscaling.reads


def test_a_listing_that_keeps_failing_is_not_trusted_past_the_ttl() -> None:
    # Given a tag-managed stack whose listing (read past the bound) named a group tagged for it, never asked
    # about since; the group then tagged for another stack, and the listing throttled from then on
    autoscaling, clock = ThrottledListing(), FakeClock()
    autoscaling.listing_fails = False
    intake = a_stack(autoscaling, clock)
    created(autoscaling, "nodes-moved")
    flooded(intake, clock, seconds=3)
    assert autoscaling.reads.count(f"tag:{OWNER}") >= 1
    autoscaling.tags["nodes-moved"] = {OWNER_TAG: "stack-b"}
    autoscaling.listing_fails = True

    # When names not known here keep coming for longer than the ttl of an answer (5 min), and then the group's
    # first event, the lookups used up
    for n in range(700):
        offered(intake, naming(f"invented-{n}", n, clock))
        clock.advance(0.5)
    for n in range(LOOKUP_BURST):
        offered(intake, naming(f"invented-again-{n}", n, clock))
    outcome = offered(intake, naming("nodes-moved", 100_000, clock))

    # Then it is not taken in for this stack by a listing read minutes ago (before: each failed listing kept
    # the last one's names stamped as read then, for as long as it failed)
    assert outcome is not IntakeOutcome.ACCEPTED


def offered(intake: Intake, event: LifecycleEvent) -> IntakeOutcome | None:
    """What intake answers the event, or None when it is retried (the name that asked for the listing)."""
    try:
        return intake.accept(event)
    except TransientError:
        return None


@dataclass
class FailingListing(CountingAutoscaling):
    """Auto Scaling whose listing of this owner's groups fails with ``failure`` while it is set (and its reads by
    name, with ``refuses_names``)."""

    failure: TransientError | None = None
    refuses_names: bool = False  # (DescribeAutoScalingGroups by name refused too)

    def group_tags(self, group: str) -> dict[str, str] | None:
        if self.refuses_names and self.failure is not None:
            self.reads.append(group)
            raise self.failure
        return super().group_tags(group)

    def groups_tagged(self, owner: str) -> frozenset[str]:
        if self.failure is None:
            return super().groups_tagged(owner)
        self.reads.append(f"tag:{owner}")
        raise self.failure


THROTTLED = TransientError("listing the groups tagged for this owner: Rate exceeded")
REFUSED = AccessRefused("listing the groups tagged for this owner", "AccessDenied", "not authorized")


def used_up(intake: Intake, clock: FakeClock) -> None:
    """The lookups of names not known here used up by invented names (each looked up and absent)."""
    for n in range(LOOKUP_BURST):
        assert intake.accept(naming(f"used-{n}", n, clock)) is IntakeOutcome.UNMANAGED


@pytest.mark.parametrize("failure", [THROTTLED, REFUSED], ids=["throttled", "refused"])
def test_a_new_groups_first_event_is_retried_not_dropped_while_the_listing_fails(
    failure: TransientError,
) -> None:
    # Given a tag-managed stack whose lookups a flood used up, Auto Scaling failing the listing of this owner's
    # groups (throttled, or refused: a policy changed), and a group created for the stack meanwhile
    autoscaling, clock = FailingListing(failure=failure), FakeClock()
    intake = a_stack(autoscaling, clock)
    used_up(intake, clock)
    assert offered(intake, naming("invented-x", 1000, clock)) is None  # (the name that asked for the listing)
    created(autoscaling, "nodes-new")

    # When its first event comes, no listing read
    clock.advance(1)
    first = naming("nodes-new", 100_000, clock)

    # Then it is retried with the listing's failure, no call made for it (before: dropped as unmanaged)
    with pytest.raises(type(failure)):
        intake.accept(first)
    assert autoscaling.reads == [*(f"used-{n}" for n in range(LOOKUP_BURST)), f"tag:{OWNER}"]

    # And once the listing is answered again, its redelivery (the queue's visibility timeout) takes it in
    autoscaling.failure = None
    clock.advance(REDELIVERY.total_seconds())
    assert intake.accept(first) is IntakeOutcome.ACCEPTED


def test_a_listing_refused_for_good_ends_each_unknown_groups_event_in_the_dead_letter_queue() -> None:
    # Given a tag-managed stack whose lookups a flood used up, then refused DescribeAutoScalingGroups for good (by
    # name and by tag: one API action)
    autoscaling, clock = FailingListing(failure=REFUSED), FakeClock()
    intake = a_stack(autoscaling, clock)
    used_up(intake, clock)
    autoscaling.refuses_names = True
    autoscaling.reads.clear()

    # When events each naming another group not known here come, each delivered 5 times 180 s apart (the intake
    # queue's maxReceiveCount: then the dead-letter queue)
    told = [naming(f"invented-{n}", n, clock) for n in range(20)]
    outcomes = []
    for _ in range(5):
        for event in told:
            try:
                outcomes.append(intake.accept(event).value)
            except AccessRefused:
                outcomes.append("refused")
        clock.advance(REDELIVERY.total_seconds())

    # Then every delivery is refused (an unexpected failure: the function's error alarm, then the dead-letter
    # queue's), none dropped as unmanaged with the refusal unseen (before: all but the one that asked for the
    # listing), and Auto Scaling was not asked once per delivery past the bound
    assert outcomes == ["refused"] * 100
    assert autoscaling.reads.count(f"tag:{OWNER}") <= 5


@dataclass
class PagedListing(CountingAutoscaling):
    """Auto Scaling whose listing of this owner's groups costs one DescribeAutoScalingGroups per page of 50."""

    pages: int = 0

    def groups_tagged(self, owner: str) -> frozenset[str]:
        names = super().groups_tagged(owner)
        self.pages += max(1, -(-len(names) // 50))
        return names


def test_a_flood_of_invented_names_costs_a_few_listings_a_minute_and_drops_no_new_groups_event() -> None:
    # Given a container of a tag-managed stack of 150 groups (3 pages of listing), and a minute of a flood of
    # invented names (30 a second), a group created for the stack halfway through
    autoscaling, clock = PagedListing(), FakeClock()
    for n in range(150):
        created(autoscaling, f"nodes-{n}")
    intake = a_stack(autoscaling, clock)
    retried: list[LifecycleEvent] = []
    for n in range(60 * 30):
        if n == 900:
            created(autoscaling, "nodes-new")
            ours = naming("nodes-new", 100_000, clock)
            first = offered(intake, ours)
            if first is None:
                retried.append(ours)
            else:
                assert first is IntakeOutcome.ACCEPTED
        dropped_or_retried(intake, naming(f"invented-{n}", n, clock), retried)
        clock.advance(1 / 30)

    # Then the listing was read a few times (before: once per LOOKUP_EVERY, 20 listings and 60 pages a minute:
    # 600 DescribeAutoScalingGroups a minute at a concurrency of 10)
    assert autoscaling.pages <= 3 * (60 / LIST_EVERY.total_seconds() + 1)

    # And the new group's event is taken in at its first delivery or its redelivery (the invented names then
    # dropped)
    clock.advance(REDELIVERY.total_seconds())
    redelivered = {event.group: offered(intake, event) for event in retried}
    assert redelivered.pop("nodes-new", IntakeOutcome.ACCEPTED) is IntakeOutcome.ACCEPTED
    assert set(redelivered.values()) <= {IntakeOutcome.UNMANAGED}


def test_a_group_the_last_listing_has_is_answered_by_it_whenever_its_action_started() -> None:
    # Given a tag-managed stack of a group it has not seen, whose lookups a flood used up, and a listing of this
    # owner's groups read since (it names the group)
    autoscaling, clock = CountingAutoscaling(), FakeClock()
    created(autoscaling, "nodes-ours")
    intake = a_stack(autoscaling, clock)
    used_up(intake, clock)
    assert intake.accept(naming("invented-x", 1000, clock)) is IntakeOutcome.UNMANAGED
    listings = autoscaling.reads.count(f"tag:{OWNER}")

    # When an action of the group starts after that listing, and its event comes soon after (within LIST_EVERY,
    # no lookup by name allowed yet)
    clock.advance(LOOKUP_EVERY.total_seconds() * 2 / 3)
    outcome = offered(intake, naming("nodes-ours", 100_000, clock))

    # Then the listing answers it: taken in at its first delivery, at no read (not retried for a listing read
    # again: only a name the listing lacks may be of a group created since)
    assert outcome is IntakeOutcome.ACCEPTED
    assert autoscaling.reads.count(f"tag:{OWNER}") == listings
    assert "nodes-ours" not in autoscaling.reads


@pytest.mark.parametrize(
    "failure",
    [
        lambda: TransientError("listing the groups tagged for this owner: Rate exceeded"),
        lambda: AccessRefused("listing the groups tagged for this owner", "AccessDenied", "not authorized"),
    ],
    ids=["throttled", "refused"],
)
def test_each_name_retried_with_the_listings_failure_raises_an_exception_of_its_own(
    failure: Callable[[], TransientError],
) -> None:
    # Given a tag-managed stack whose lookups a flood used up, and the listing of this owner's groups failing
    autoscaling, clock = FailingListing(failure=failure()), FakeClock()
    intake = a_stack(autoscaling, clock)
    used_up(intake, clock)

    # When the flood's names come within LOOKUP_EVERY of the failed listing (each retried with its failure)
    raised: list[TransientError] = []
    for n in range(20):  # (2 s: no lookup by name let through meanwhile)
        with pytest.raises(TransientError) as retried:
            intake.accept(naming(f"invented-{n}", 1000 + n, clock))
        raised.append(retried.value)
        clock.advance(0.1)

    # Then each is an exception of its own, of the failure's type and words, whose traceback is its own raise's
    # (before: one object raised again and again, two frames more at each raise here, a whole invocation's stack
    # more at each in the function: thousands of frames kept, each logged with a refusal's traceback)
    assert {type(error) for error in raised} == {type(autoscaling.failure)}
    assert {str(error) for error in raised} == {str(autoscaling.failure)}
    assert len({id(error) for error in raised}) == len(raised)
    assert len({len(traceback.extract_tb(error.__traceback__)) for error in raised[1:]}) == 1
