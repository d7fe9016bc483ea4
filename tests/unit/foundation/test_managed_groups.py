"""ManagedGroups in the by-tag mode: what it remembers of group names that anyone may send to the intake queue."""

from __future__ import annotations

from dataclasses import dataclass, field

from nodecycle.domain.catalog import MAX_ABSENT_GROUPS, ManagedGroups
from tests.support.fakes import FakeAutoscaling, FakeClock

OWNER = "stack-a"
OURS = "nodes-ours"


@dataclass
class CountingAutoscaling(FakeAutoscaling):
    """Auto Scaling that counts DescribeAutoScalingGroups (the port's ``group_tags``) per group."""

    reads: list[str] = field(default_factory=list)

    def group_tags(self, group: str) -> dict[str, str] | None:
        self.reads.append(group)
        return super().group_tags(group)


def by_tag(autoscaling: CountingAutoscaling) -> ManagedGroups:
    return ManagedGroups(
        owner=OWNER, names=(), by_tag=True, hooks=("*",), autoscaling=autoscaling, clock=FakeClock()
    )


def test_a_flood_of_invented_group_names_is_not_remembered_for_ever() -> None:
    # Given a by-tag stack that has read its own group's tags
    autoscaling = CountingAutoscaling(tags={OURS: {"nodecycle:owner": OWNER}})
    groups = by_tag(autoscaling)
    assert groups.manages_group(OURS)

    # When notifications name more distinct groups that do not exist than it remembers
    invented = [f"invented-{n}" for n in range(MAX_ABSENT_GROUPS + 1)]
    for name in invented:
        assert not groups.manages_group(name)
    autoscaling.reads.clear()

    # Then the first of them was forgotten (asking again reads it again: what a warm container holds is
    # bounded), the latest is still known, and this stack's own group still costs no read
    assert not groups.manages_group(invented[0])
    assert not groups.manages_group(invented[-1])
    assert groups.manages_group(OURS)
    assert autoscaling.reads == [invented[0]]


def test_a_name_auto_scaling_cannot_have_costs_no_read() -> None:
    # Given a by-tag stack
    autoscaling = CountingAutoscaling(tags={OURS: {"nodecycle:owner": OWNER}})
    groups = by_tag(autoscaling)

    # When notifications name groups Auto Scaling refuses to create (empty, over 255 characters, a control
    # character), Then none is managed and none is read (Auto Scaling would answer a ValidationError)
    for name in ("", "x" * 256, "nodes\x00general"):
        assert not groups.manages_group(name)
    assert autoscaling.reads == []
    # (the longest name it accepts is read)
    assert not groups.manages_group("x" * 255)
    assert autoscaling.reads == ["x" * 255]
