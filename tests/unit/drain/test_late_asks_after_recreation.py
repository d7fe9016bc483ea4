"""The first ask of a drain, given a slot the budget cannot vouch for (``SlotDecision.unmarked``: its ConfigMap was
created again after the lifecycle began, and the mark of a release may have gone with it): the lifecycle's record
tells whether this is a late delivery of a drain that gave its slot back. Read then only: a drain's ask reads no
record otherwise."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.drain.acquire import AcquireSlot
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.nodes import NodeFinder
from tests.support.fakes import T0, FakeMetrics, InMemoryRecords
from tests.unit.drain.test_drain_steps import (
    NODE,
    FakeCluster,
    FakeEvents,
    FakeSlots,
    NoDns,
    node,
    policy,
    terminating,
    wakes_to_nowhere,
)


class CountedRecords(InMemoryRecords):
    """Records that count the reads of the asking lifecycle's own record (a terminate hook's ask reads those of
    its instance's disruptions anyway: see AcquireSlot._linked)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def get(self, record_id: str) -> LifecycleRecord | None:
        self.reads += record_id == terminating(Step.ACQUIRE_SLOT).id
        return super().get(record_id)


def ask(slots: FakeSlots, records: CountedRecords, record: LifecycleRecord) -> tuple[bool, bool]:
    """Run ``record``'s ask: whether it goes on to its cordon, and whether its node holds a slot after it."""
    cluster = FakeCluster(nodes={NODE: node()})
    outcome = AcquireSlot(
        finder=NodeFinder(cluster, NoDns()),
        cluster=cluster,
        slots=slots,
        dispatcher=wakes_to_nowhere(),
        policy=policy(),
        metrics=FakeMetrics(),
        events=FakeEvents(),
        records=records,
    )(record, T0 + timedelta(minutes=2))
    return (outcome.then is None and not outcome.again), NODE in slots.holders


def recreated(after_the_lifecycle_began: bool) -> FakeSlots:
    """A budget with room, its ConfigMap created again a minute after the lifecycle began (or a minute before)."""
    slots = FakeSlots()
    slots.store.created_at = T0 + timedelta(minutes=1 if after_the_lifecycle_began else -1)
    return slots


def test_a_first_ask_after_the_configmap_was_created_reads_no_record() -> None:
    records = CountedRecords()
    asking = terminating(Step.ACQUIRE_SLOT)
    records.create(asking)

    assert ask(recreated(after_the_lifecycle_began=False), records, asking) == (True, True)
    assert records.reads == 0


def test_a_late_ask_of_a_finished_drain_gives_the_slot_back_at_once() -> None:
    # Given a drain whose record is done, and the ConfigMap created again since it began
    records = CountedRecords()
    records.create(terminating(Step.DONE, seq=9))
    slots = recreated(after_the_lifecycle_began=True)

    # When a late delivery of its first ask runs
    goes_on, held = ask(slots, records, terminating(Step.ACQUIRE_SLOT))

    # Then it does not go on (its commit would lose anyway), and the slot it was given is given back, marked
    assert (goes_on, held) == (False, False)
    assert slots.released == [NODE]
    assert records.reads == 1


def test_a_late_ask_of_a_drain_at_its_cleanup_gives_the_slot_back() -> None:
    # (a cleanup never asks again: one that watches its node stays at its cleanup for hours after its release)
    records = CountedRecords()
    records.create(terminating(Step.CLEANUP, seq=8))
    slots = recreated(after_the_lifecycle_began=True)

    assert ask(slots, records, terminating(Step.ACQUIRE_SLOT)) == (False, False)


@pytest.mark.parametrize("step", [Step.CORDON, Step.EVICT, Step.COMPLETE])
def test_a_late_ask_of_a_drain_in_progress_keeps_its_slot(step: Step) -> None:
    # Given a drain that went on (its slot lost with the ConfigMap, its node not yet claimed or not counted)
    records = CountedRecords()
    records.create(terminating(step, seq=3))
    slots = recreated(after_the_lifecycle_began=True)

    # Then a late delivery of its ask takes the slot for it: its own (its renewal finds it held, its cleanup
    # gives it back)
    assert ask(slots, records, terminating(Step.ACQUIRE_SLOT)) == (True, True)
    assert slots.released == []


def test_an_ask_whose_record_started_over_keeps_the_slot_for_the_lifecycle_there_now() -> None:
    # Given the record holding another lifecycle now (the next maintenance of the instance, its token another)
    records = CountedRecords()
    records.create(
        terminating(Step.ACQUIRE_SLOT, seq=5, token="next", received_at=T0 + timedelta(seconds=30))
    )
    slots = recreated(after_the_lifecycle_began=True)

    # Then the slot stays (a release under the old token would not be marked against that lifecycle, nor freed)
    assert ask(slots, records, terminating(Step.ACQUIRE_SLOT)) == (True, True)
