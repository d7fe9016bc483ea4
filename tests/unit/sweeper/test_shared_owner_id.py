"""The sweep of budget entries and annotations of this owner id whose lifecycle is missing from this stack's
records: another stack deployed with the same owner id drains an instance of its own group (left alone, and the
part fails naming it), or a stack of this name deleted mid-drain and deployed again left it (swept, as an instance
gone is, as before)."""

from __future__ import annotations

import pytest

from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.ports.lifecycle import Membership
from nodecycle.domain.sweep.annotations import LeftoverAnnotations
from nodecycle.domain.sweep.budget_entries import StaleBudgetEntries
from nodecycle.domain.sweep.shared_owner import OtherStacks
from nodecycle.domain.sweep.sweeper import SweepFailed
from tests.support.fakes import T0, FakeClock, FakeMetrics, InMemoryRecords, RecordingQueues
from tests.unit.sweeper.test_orphans import AMPLE
from tests.unit.sweeper.test_sweeper import AliveInstances, FakeBudget, FakeNodes, annotated, entry

MINE = "workers-a"  # this stack's group
WHERE = {
    # the other stack's
    "i-0000000000000000b": Membership(group="workers-b", lifecycle_state="Terminating:Wait"),
    # a predecessor's leftover (a stack of this name deleted mid-drain, deployed again)
    "i-000000000000000a1": Membership(group=MINE, lifecycle_state="Terminating:Wait"),
    # gone: no group lists it, EC2 has it terminated (its tag still names the other group)
    "i-00000000000000gone": Membership(group="workers-b", lifecycle_state=None, ec2_state="terminated"),
}


def others() -> OtherStacks:
    return OtherStacks(
        owner="stack-a", membership=WHERE.__getitem__, manages_group=lambda group: group == MINE
    )


def test_budget_entries_of_another_stacks_group_are_kept_and_the_part_fails_naming_the_shared_owner_id() -> (
    None
):
    # Given this owner's slots of three lifecycles none of this stack's records holds: one of an instance of the
    # other stack's group, one of this stack's group, one of an instance gone
    budget = FakeBudget(
        [
            entry("theirs", "i-0000000000000000b/terminate/b", "i-0000000000000000b"),
            entry("left", "i-000000000000000a1/terminate/a", "i-000000000000000a1"),
            entry("gone", "i-00000000000000gone/terminate/g", "i-00000000000000gone"),
        ]
    )
    records = InMemoryRecords()
    part = StaleBudgetEntries(
        budget=budget,
        records=records,
        node_names=lambda: {"theirs", "left", "gone"},
        alive_instances=AliveInstances(
            {"i-0000000000000000b", "i-000000000000000a1", "i-00000000000000gone"}
        ),
        waker=Dispatcher(records=records, queues=RecordingQueues(), clock=FakeClock(), metrics=FakeMetrics()),
        others=others(),
    )

    # When the sweep judges them
    with pytest.raises(SweepFailed, match="owner id stack-a is another stack's too") as failed:
        part([], T0, AMPLE)

    # Then the other stack's slot is kept, and named with its group; the others are swept
    assert budget.judged == {"theirs": False, "left": True, "gone": True}
    assert "workers-b" in str(failed.value)
    assert "i-0000000000000000b/terminate/b" in str(failed.value)


def test_annotations_of_another_stacks_group_are_left_and_the_part_fails_after_clearing_the_others() -> None:
    # Given nodes annotated by this owner for lifecycles none of this stack's records holds
    nodes = FakeNodes(
        [
            annotated("theirs", "stack-a", "i-0000000000000000b", "b"),
            annotated("left", "stack-a", "i-000000000000000a1", "a"),
            annotated("gone", "stack-a", "i-00000000000000gone", "g"),
        ]
    )
    part = LeftoverAnnotations(
        owner="stack-a", cluster=nodes, records=InMemoryRecords(), metrics=FakeMetrics(), others=others()
    )

    # When the sweep judges them
    with pytest.raises(SweepFailed, match="owner id stack-a is another stack's too") as failed:
        part([], T0, AMPLE)

    # Then the other stack's node keeps its annotations; the leftovers of this stack's group and of an instance
    # gone are cleared
    assert nodes.released == ["left", "gone"]
    assert "group workers-b (node theirs)" in str(failed.value)


def test_without_another_stacks_lifecycle_the_sweep_of_missing_lifecycles_succeeds() -> None:
    nodes = FakeNodes([annotated("left", "stack-a", "i-000000000000000a1", "a")])
    counts = LeftoverAnnotations(
        owner="stack-a", cluster=nodes, records=InMemoryRecords(), metrics=FakeMetrics(), others=others()
    )([], T0, AMPLE)
    assert counts == {"AnnotationsCleared": 1}
