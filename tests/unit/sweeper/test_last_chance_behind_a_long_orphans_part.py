"""A stalled action's last chance when the parts of the sweep before the lifecycles' take long, in the sweep's own
order (``domain/sweep/order.py``) and with the real ``Timing``.

The settlement point (``Timing.settle_before_seconds``: an interval, the schedule's minute, a margin) reckons the next
sweep to reach a stalled action as late as its schedule may fire it (EventBridge runs a rate schedule "within that
minute, but not on the precise 0th second", Amazon EventBridge User Guide, scheduled rules), not how far into that
sweep the lifecycles' part begins. The orphans' keep-alive runs before it, and with a backlog of held instances (intake
down through an instance refresh: one DescribeAutoScalingGroups in pages, then a heartbeat per hook and instance, each
throttled and retried) it takes minutes. A sweep that reached the action 421 s before its global timeout judged it not
at its last chance; the next, fired late in its minute, reached it after the orphans' 170 s, past the global timeout:
Auto Scaling ended it with the hook's default result, not the product (invariant 11)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from datetime import datetime, timedelta

import pytest

from nodecycle.domain.model import ActionRef, LifecycleRecord
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.sweep.order import sweep_parts
from nodecycle.domain.sweep.sweep_time import ORPHANS_SHARE, RESERVE, SHARES, SweepTime
from nodecycle.domain.sweep.sweeper import Counts, Sweeper, SweepFailed, SweepPart
from nodecycle.settings import Timing
from tests.unit.sweeper.test_last_sweep_within_the_schedule_minute import repair_as_configured
from tests.unit.sweeper.test_sweeper import Repair, stalled_at_its_last_chance

SWEEPER_TIMEOUT = 300.0  # the SweeperFunction's Timeout


def sweeper(repair: Repair, orphans_take: float | list[float]) -> Sweeper:
    """The sweep's parts in their order: the orphans' keep-alive taking ``orphans_take`` seconds at each sweep (or the
    next of a list, one per sweep: a backlog of held instances), the lifecycles' repair as configured, and the others
    doing nothing."""

    def keep_alive(open_records: Sequence[LifecycleRecord], now: datetime, time: SweepTime) -> Counts:
        list(open_records)  # (listed, as the keep-alive lists them)
        repair.clock.advance(orphans_take.pop(0) if isinstance(orphans_take, list) else orphans_take)
        return {"LifecyclesOrphaned": 0}

    def idle(open_records: Sequence[LifecycleRecord], now: datetime, time: SweepTime) -> Counts:
        return {}

    parts: dict[str, SweepPart] = sweep_parts(
        keep_alive=keep_alive, repair=repair.part(), adopt=idle, cluster={}, addresses=idle
    )
    return Sweeper(
        owner="stack-a",
        records=repair.records,
        clock=repair.clock,
        metrics=repair.metrics,
        parts=parts,
        shares=SHARES,
        late_after=repair.lateness,
    )


def sweep(repair: Repair, sweeps: Sweeper, scheduled_at: datetime) -> Counts:
    fired = repair.clock.now()
    return sweeps.sweep(
        lambda: SWEEPER_TIMEOUT - (repair.clock.now() - fired).total_seconds(), scheduled_at=scheduled_at
    )


def test_a_stalled_action_is_settled_before_its_global_timeout_by_a_sweep_whose_orphans_take_minutes() -> (
    None
):
    # Given the defaults (sweeps five minutes apart, a margin of 60 s: settled 420 s before the global timeout), and a
    # stalled lifecycle whose action's global timeout comes 421 s after a sweep that fires on time, its orphans' part
    # done at once; the next sweep fires 59 s late in its minute, and its orphans' part takes 170 s (a backlog)
    timing = Timing()
    repair = repair_as_configured(timing)
    record = repair.records.get(stalled_at_its_last_chance(repair))
    assert record is not None
    sweeps = sweeper(repair, orphans_take=[0.0, 170.0])
    tick = record.global_deadline - timedelta(seconds=421)
    repair.clock.current = tick

    # When the first sweep runs (not the stalled action's last chance yet: it is left, resent)
    first = sweep(repair, sweeps, scheduled_at=tick)
    assert first["LifecyclesSettled"] == 0
    assert repair.autoscaling.completed == []
    # and the next, late in its minute
    tick += timedelta(seconds=timing.sweep_interval_seconds)
    repair.clock.current = tick + timedelta(seconds=59)
    second = sweep(repair, sweeps, scheduled_at=tick)

    # Then that sweep settles the action, a completion's margin before its global timeout at least (before: its
    # lifecycles' part came 108 s after the global timeout, and found the action expired)
    assert (second["LifecyclesSettled"], second["LifecyclesExpired"]) == (1, 0)
    # (judged once in that sweep, by its first part, and counted stalled once a sweep, as the alarm reckons)
    assert second["LifecyclesStalled"] == 1
    assert repair.metrics.counts["LifecyclesStalled"] == 2
    assert [result for _, result in repair.autoscaling.completed] == [ActionResult.CONTINUE]
    settled = repair.records.get(record.id)
    assert settled is not None
    assert settled.outcome == "settled-by-sweeper"
    assert settled.completed_at is not None
    assert settled.completed_at <= record.global_deadline - timedelta(seconds=timing.heartbeat_margin_seconds)


def test_the_orphans_keep_their_share_when_many_actions_are_at_their_last_chance_at_once() -> None:
    # Given thirty stalled lifecycles at their last chance when a sweep starts (a stalled instance refresh), each
    # completion throttled for 10 s: 300 s of settlements, a whole sweep's
    repair = repair_as_configured(Timing())
    record_ids = [
        stalled_at_its_last_chance(
            repair, id=f"i-{n:017x}/terminate/t{n}", instance_id=f"i-{n:017x}", token=f"t{n}", node=f"n{n}"
        )
        for n in range(30)
    ]
    for n in range(30):
        repair.autoscaling.issue(f"t{n}", f"i-{n:017x}")
    complete = repair.autoscaling.complete

    def throttled(action: ActionRef, result: ActionResult) -> bool:
        repair.clock.advance(10)
        return complete(action, result)

    repair.autoscaling.complete = throttled  # type: ignore[method-assign]
    fired = repair.clock.now()
    orphans_had: list[float] = []

    def keep_alive(open_records: Sequence[LifecycleRecord], now: datetime, time: SweepTime) -> Counts:
        orphans_had.append(time.invocation_left())
        return {"LifecyclesOrphaned": 0}

    def idle(open_records: Sequence[LifecycleRecord], now: datetime, time: SweepTime) -> Counts:
        return {}

    sweeps = Sweeper(
        owner="stack-a",
        records=repair.records,
        clock=repair.clock,
        metrics=repair.metrics,
        parts=sweep_parts(
            keep_alive=keep_alive, repair=repair.part(), adopt=idle, cluster={}, addresses=idle
        ),
        shares=SHARES,
    )

    # When the sweep runs within its 300 s
    with contextlib.suppress(SweepFailed):
        sweeps.sweep(lambda: SWEEPER_TIMEOUT - (repair.clock.now() - fired).total_seconds())

    # Then the settlements first left the orphans' keep-alive its share of the sweep (less one settlement begun), and
    # the lifecycles' part went on with the settlements after it
    (left,) = orphans_had
    held_back_after_it = sum((SHARES[name] for name in ("lifecycles", "adoptions", "addresses")), timedelta())
    own = timedelta(seconds=left) - RESERVE - held_back_after_it
    assert own >= ORPHANS_SHARE - timedelta(seconds=10)
    settled = [
        record_id for record_id in record_ids if (r := repair.records.get(record_id)) and r.completed_at
    ]
    assert len(settled) > (300 - RESERVE.total_seconds() - own.total_seconds()) // 10


@pytest.mark.parametrize("before_global_timeout", range(421, 721, 37))
@pytest.mark.parametrize("fired_late", [(0, 59, 59), (59, 0, 59), (59, 59, 0), (30, 59, 0)])
@pytest.mark.parametrize("orphans_take", [(0.0, 170.0, 170.0), (170.0, 170.0, 170.0), (170.0, 0.0, 0.0)])
def test_a_stalled_action_is_settled_in_its_window_whatever_the_orphans_take_and_the_schedule_fires(
    before_global_timeout: int, fired_late: tuple[int, int, int], orphans_take: tuple[float, float, float]
) -> None:
    # Given the defaults, a stalled lifecycle, and sweeps on schedule five minutes apart from ``before_global_timeout``
    # before its global timeout, each fired within its minute as ``fired_late`` says, its orphans' part taking as long
    # as ``orphans_take`` says (seconds: none, or 170 s with a backlog)
    timing = Timing()
    repair = repair_as_configured(timing)
    record = repair.records.get(stalled_at_its_last_chance(repair))
    assert record is not None
    sweeps = sweeper(repair, orphans_take=list(orphans_take))
    tick = record.global_deadline - timedelta(seconds=before_global_timeout)

    # When the sweeps run, until one settles it
    for late in fired_late:
        repair.clock.current = tick + timedelta(seconds=late)
        if sweep(repair, sweeps, scheduled_at=tick)["LifecyclesSettled"]:
            break
        tick += timedelta(seconds=timing.sweep_interval_seconds)

    # Then it was settled by the product a completion's margin before its global timeout at least, and no sooner than
    # the settlement point less a sweep's lateness (a minute at most): never expired, never settled minutes early
    settled = repair.records.get(record.id)
    assert settled is not None
    assert settled.outcome == "settled-by-sweeper"
    assert settled.completed_at is not None
    margin = timedelta(seconds=timing.heartbeat_margin_seconds)
    assert settled.completed_at <= record.global_deadline - margin
    earliest = timedelta(seconds=timing.settle_before_seconds + timing.sweep_lateness_seconds)
    assert settled.completed_at >= record.global_deadline - earliest
