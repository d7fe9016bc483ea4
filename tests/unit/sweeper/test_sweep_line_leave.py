"""A launch waiting in an Elastic IP pool's line that the sweeper moves on (settled at its last chance, or found
lapsed): it leaves the line and the next waiter is woken, as when the engine moves it on
(``AssignAddress.ended_in_line``). Before, the line kept its place until a look behind it found it over, and the
address it was woken for idled until the next waiter's own look."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from nodecycle.domain.eip import SCRATCH
from nodecycle.domain.model import LifecycleRecord, Step, Transition
from nodecycle.domain.sweep.lifecycles import LifecycleRepair
from nodecycle.domain.sweep.sweep_time import SweepTime
from nodecycle.domain.sweep.sweeper import Counts
from tests.unit.foundation.test_engine import kept_alive, make_record
from tests.unit.sweeper.test_sweeper import INTERVAL, MARGIN, Repair

LAUNCH = (Step.ASSIGN_EIP, Step.COMPLETE, Step.DONE)
SETTLE_BEFORE = INTERVAL + 2 * MARGIN  # as Repair's part


@dataclass
class LineRepair(Repair):
    """The lifecycles' part with the hook the sweeper's wiring gives it; what it was told."""

    left: list[tuple[str, datetime]] = field(default_factory=list)

    def part(self) -> LifecycleRepair:
        part = super().part()
        part._out_of_line = lambda record, now: self.left.append((record.id, now))
        return part

    def sweep(self) -> Counts:
        return self.part()(
            list(self.records.open_records("stack-a")), self.clock.now(), SweepTime(lambda: 300, timedelta())
        )


def waiting(repair: Repair, *, in_line: bool = True) -> LifecycleRecord:
    """A launch at ASSIGN_EIP, waiting in its pool's line (or, ``in_line`` false, verifying an association)."""
    scratch = (
        {"exhausted_since": "2026-01-01T00:00:00+00:00", "exhausted": 1}
        if in_line
        else {"verify": "eipalloc-1"}
    )
    return make_record(
        LAUNCH,
        Step.ASSIGN_EIP,
        id="i-0123456789abcdef0/launch/token",
        transition=Transition.LAUNCHING,
        hook="launch",
        extra={SCRATCH: scratch},
    )


def test_a_launch_in_line_the_sweeper_settles_at_its_last_chance_leaves_the_line() -> None:
    # Given a launch waiting in its pool's line, its queue stalled, at the last sweep before its global timeout
    repair = LineRepair()
    record = waiting(repair)
    repair.clock.current = record.global_deadline - SETTLE_BEFORE
    repair.records.create(kept_alive(repair.autoscaling, record, repair.clock.now() - timedelta(seconds=100)))

    # When the sweep settles it
    counts = repair.sweep()

    # Then its action is completed with the failure result and it leaves the line, once
    assert counts["LifecyclesSettled"] == 1
    assert len(repair.autoscaling.completed) == 1
    assert repair.left == [(record.id, repair.clock.now())]


def test_a_launch_in_line_whose_action_the_sweeper_finds_lapsed_leaves_the_line() -> None:
    # Given a launch waiting in its pool's line whose action Auto Scaling ended at its heartbeat timeout (the
    # sweeper's last heartbeat was at its start; no one kept it alive since)
    repair = LineRepair()
    record = waiting(repair)
    repair.records.create(kept_alive(repair.autoscaling, record, record.started_at))
    repair.clock.current = record.heartbeat_deadline + timedelta(seconds=30)

    # When a sweep finds it lapsed
    counts = repair.sweep()

    # Then it is recorded expired and leaves the line
    assert counts["LifecyclesExpired"] == 1
    assert repair.left == [(record.id, repair.clock.now())]


def test_a_launch_not_in_line_is_not_told() -> None:
    # Given a launch at ASSIGN_EIP verifying its association (not waiting in a line), at its last chance
    repair = LineRepair()
    record = waiting(repair, in_line=False)
    repair.clock.current = record.global_deadline - SETTLE_BEFORE
    repair.records.create(kept_alive(repair.autoscaling, record, repair.clock.now() - timedelta(seconds=100)))

    # When the sweep settles it, Then no line is told
    assert repair.sweep()["LifecyclesSettled"] == 1
    assert repair.left == []
