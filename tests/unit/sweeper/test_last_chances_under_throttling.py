"""Many actions at their last chance at once while Auto Scaling throttles (a stalled instance refresh): the order in
which a sweep serves them and the other open actions, in the sweep's own order (``domain/sweep/order.py``), with the
real ``Timing`` and a fake clock.

Auto Scaling throttles CompleteLifecycleAction and RecordLifecycleActionHeartbeat per account and region ("Rate
exceeded", ``Throttling``); botocore's standard retry mode backs each throttled call off, ``rand x 2^(attempt - 1)``
seconds up to 20 s, over its five attempts: a settlement takes seconds, and a sweep serves only so many. An action
lapses at the earlier of its heartbeat deadline and its global timeout, whichever part of the sweep it waits in: the
sweep serves the one Auto Scaling would end soonest first (earliest deadline first), so that none lapses while one
with more time was served before it."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Sequence
from datetime import datetime, timedelta

import pytest

from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import ActionRef, LifecycleRecord, Step, global_deadline
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.sweep.order import sweep_parts
from nodecycle.domain.sweep.sweep_time import SHARES, SweepTime
from nodecycle.domain.sweep.sweeper import Counts, Sweeper, SweepFailed
from nodecycle.settings import Timing
from tests.support.fakes import T0
from tests.unit.foundation.test_engine import PLAN, kept_alive, make_record
from tests.unit.sweeper.test_last_chance_behind_a_long_orphans_part import sweeper
from tests.unit.sweeper.test_last_sweep_within_the_schedule_minute import repair_as_configured
from tests.unit.sweeper.test_sweeper import Repair

SWEEPER_TIMEOUT = 300.0  # the SweeperFunction's Timeout
HOOK = 600  # the hooks' heartbeat timeout (s)


def stalled(repair: Repair, n: int, started: datetime, renewed: datetime) -> LifecycleRecord:
    """Stalled lifecycle ``n`` (a drain at its eviction, its message lost) whose action started at ``started`` and was
    last heartbeated at ``renewed``."""
    token, instance = f"t{n}", f"i-{n:017x}"
    repair.autoscaling.issue(token, instance, at=started)
    record = make_record(
        PLAN,
        Step.EVICT,
        id=f"{instance}/terminate/{token}",
        instance_id=instance,
        token=token,
        node=f"n{n}",
        seq=4,
        received_at=started,
        started_at=started,
        updated_at=started,
        due_at=started + timedelta(minutes=1),
        verified_at=started,
        heartbeat_timeout=HOOK,
        global_deadline=global_deadline(started, HOOK),
    )
    record = kept_alive(repair.autoscaling, record, renewed)
    assert repair.records.create(record)
    return record


def throttled(repair: Repair, seconds: float) -> list[tuple[str, datetime]]:
    """Every completion and heartbeat takes ``seconds`` (throttled, retried by botocore); the calls that landed, each
    with its token and the time it landed."""
    landed: list[tuple[str, datetime]] = []
    complete, heartbeat = repair.autoscaling.complete, repair.autoscaling.heartbeat

    def completing(action: ActionRef, result: ActionResult) -> bool:
        repair.clock.advance(seconds)
        done = complete(action, result)
        if done:
            landed.append((action.token, repair.clock.now()))
        return done

    def beating(action: ActionRef) -> bool:
        repair.clock.advance(seconds)
        done = heartbeat(action)
        if done:
            landed.append((action.token, repair.clock.now()))
        return done

    repair.autoscaling.complete = completing  # type: ignore[method-assign]
    repair.autoscaling.heartbeat = beating  # type: ignore[method-assign]
    return landed


def test_a_heartbeat_due_soon_is_not_left_to_lapse_behind_settlements_with_more_time() -> None:
    # Given the defaults (settled 420 s before the global timeout) and, when a throttled sweep starts, twenty stalled
    # lifecycles at their last chance, 400 s before their global timeout, and one stalled lifecycle hours from its
    # own whose heartbeat deadline comes in 200 s (the sweep before ran out of time before it); every completion and
    # heartbeat takes 10 s, and the orphans' keep-alive 60 s
    repair = repair_as_configured(Timing())
    repair.autoscaling.action_timeout = HOOK
    start = global_deadline(T0, HOOK) - timedelta(seconds=400)
    repair.clock.current = start
    at_their_last_chance = [stalled(repair, n, T0, start - timedelta(seconds=100)) for n in range(20)]
    beat_soon = stalled(repair, 99, start - timedelta(hours=1), start - timedelta(seconds=HOOK - 200))
    assert beat_soon.heartbeat_deadline == start + timedelta(seconds=200)
    landed = throttled(repair, 10)

    # When the sweep runs within its 300 s
    with contextlib.suppress(SweepFailed):
        sweeper(repair, orphans_take=60).sweep(
            lambda: SWEEPER_TIMEOUT - (repair.clock.now() - start).total_seconds()
        )

    # Then that action was heartbeated before its deadline, though the settlements of actions with more time (their
    # global timeouts 200 s after its heartbeat deadline) were left for it (before: they came first, and it lapsed,
    # undrained, hours before its global timeout: invariant 11)
    assert repair.autoscaling.expires_at(beat_soon.token) > beat_soon.heartbeat_deadline
    # and the sweep served the calls in the order of the deadlines they kept: none after one of a later deadline
    deadlines = {record.token: record.global_deadline for record in at_their_last_chance}
    deadlines[beat_soon.token] = beat_soon.heartbeat_deadline
    served = [deadlines[token] for token, _ in landed]
    assert served == sorted(served)
    assert all(when <= deadlines[token] for token, when in landed)


def test_settlements_that_cannot_wait_for_the_orphans_part_are_not_left_behind_it() -> None:
    # Given the defaults and thirty stalled lifecycles at their last chance when a throttled sweep starts, a batch of an
    # instance refresh whose actions started together: their global timeout comes 140 s after the sweep starts, and
    # every completion takes 3 s; the orphans' keep-alive has a backlog, each heartbeat of it taking 5 s
    repair = repair_as_configured(Timing())
    repair.autoscaling.action_timeout = HOOK
    start = global_deadline(T0, HOOK) - timedelta(seconds=140)
    repair.clock.current = start
    batch = [stalled(repair, n, T0, start - timedelta(seconds=100)) for n in range(30)]
    landed = throttled(repair, 3)
    orphans_from: list[float] = []

    def keep_alive(open_records: Sequence[LifecycleRecord], now: datetime, time: SweepTime) -> Counts:
        orphans_from.append((repair.clock.now() - start).total_seconds())
        while time.enough():
            repair.clock.advance(5)
        return {"LifecyclesOrphaned": 0}

    def idle(open_records: Sequence[LifecycleRecord], now: datetime, time: SweepTime) -> Counts:
        return {}

    sweeps = Sweeper(
        owner="stack-a",
        records=repair.records,
        clock=repair.clock,
        metrics=repair.metrics,
        parts=sweep_parts(
            keep_alive=keep_alive,
            repair=repair.part(),
            adopt=idle,
            cluster={"budget": idle, "annotations": idle},
            addresses=idle,
        ),
        shares=SHARES,
    )

    # When the sweep runs within its 300 s
    with contextlib.suppress(SweepFailed):
        sweeps.sweep(lambda: SWEEPER_TIMEOUT - (repair.clock.now() - start).total_seconds())

    # Then every one of them was settled before its global timeout (before: the first part stopped at its share, 65 s
    # in, and the eight it had not reached waited behind the orphans' 60 s: four came after the global timeout, which
    # ended them with the hook's default result, not the product's)
    assert sorted(token for token, _ in landed) == sorted(record.token for record in batch)
    assert all(when <= batch[0].global_deadline for _, when in landed)
    # and the orphans' keep-alive still had time of its own after them
    (began,) = orphans_from
    assert began < 100


@pytest.mark.parametrize("orphans_take", [0.0, 60.0])
def test_a_settlement_auto_scaling_throttled_past_the_retries_is_made_again_later_in_the_same_sweep(
    orphans_take: float,
) -> None:
    # Given the defaults and a stalled lifecycle at its last chance, 300 s before its global timeout when the sweep
    # starts (the next sweep comes after it), and Auto Scaling throttling its completion past botocore's retries once
    # (15 s of backoff); the orphans' keep-alive takes ``orphans_take``
    repair = repair_as_configured(Timing())
    repair.autoscaling.action_timeout = HOOK
    start = global_deadline(T0, HOOK) - timedelta(seconds=300)
    repair.clock.current = start
    record = stalled(repair, 1, T0, start - timedelta(seconds=100))
    complete = repair.autoscaling.complete
    throttled_once: list[ActionRef] = []

    def completing(action: ActionRef, result: ActionResult) -> bool:
        if not throttled_once:
            throttled_once.append(action)
            repair.clock.advance(15)
            raise TransientError("CompleteLifecycleAction: Throttling: Rate exceeded")
        return complete(action, result)

    repair.autoscaling.complete = completing  # type: ignore[method-assign]

    # When the sweep runs within its 300 s
    with pytest.raises(SweepFailed):  # (the throttled call fails it all the same: its alarm)
        sweeper(repair, orphans_take=orphans_take).sweep(
            lambda: SWEEPER_TIMEOUT - (repair.clock.now() - start).total_seconds()
        )

    # Then the action was settled by this sweep all the same, before its global timeout (before: the first part's
    # failed settlement was left to the engine's retry, which a stalled queue never runs, and to the next sweep, which
    # came after the global timeout: Auto Scaling ended it with the hook's default result)
    assert [action.token for action, _ in repair.autoscaling.completed] == [record.token]
    settled = repair.records.get(record.id)
    assert settled is not None
    assert settled.outcome == "settled-by-sweeper"
    assert settled.completed_at is not None
    assert settled.completed_at < record.global_deadline
    # counted once, as the alarms reckon: one action near its global timeout, one stalled
    assert repair.metrics.counts["GlobalTimeoutsNear"] == 1
    assert repair.metrics.counts["LifecyclesStalled"] == 1


@pytest.mark.parametrize(("actions", "seed"), [(50, 1), (50, 2), (300, 3), (300, 4)])
def test_many_actions_at_their_last_chance_none_lapses_while_one_with_more_time_is_served(
    actions: int, seed: int
) -> None:
    # Given the defaults and, when a throttled sweep starts, ``actions`` stalled lifecycles at their last chance, their
    # global timeouts spread over the window (60 s to 420 s away), and as many again hours from theirs, some of them
    # with a heartbeat deadline within the sweep (the sweep before ran out of time); every call takes 1 to 6 s, the
    # orphans' keep-alive 60 s
    rng = random.Random(seed)
    repair = repair_as_configured(Timing())
    repair.autoscaling.action_timeout = HOOK
    start = global_deadline(T0, HOOK) + timedelta(hours=1)
    repair.clock.current = start
    deadlines: dict[str, datetime] = {}
    for n in range(actions):
        ends_in = timedelta(seconds=rng.uniform(61, 420))
        began = start + ends_in - global_deadline(T0, HOOK) + T0
        record = stalled(repair, n, began, start - timedelta(seconds=100))
        deadlines[record.token] = min(record.heartbeat_deadline, record.global_deadline)
    for n in range(actions, 2 * actions):
        renewed = start - timedelta(seconds=rng.uniform(100, HOOK - 120))
        record = stalled(repair, n, start - timedelta(hours=2), renewed)
        deadlines[record.token] = min(record.heartbeat_deadline, record.global_deadline)
    complete, heartbeat = repair.autoscaling.complete, repair.autoscaling.heartbeat
    served: list[tuple[str, datetime]] = []

    def completing(action: ActionRef, result: ActionResult) -> bool:
        repair.clock.advance(rng.uniform(1, 6))
        if complete(action, result):
            served.append((action.token, repair.clock.now()))
            return True
        return False

    def beating(action: ActionRef) -> bool:
        repair.clock.advance(rng.uniform(1, 6))
        if heartbeat(action):
            served.append((action.token, repair.clock.now()))
            return True
        return False

    repair.autoscaling.complete = completing  # type: ignore[method-assign]
    repair.autoscaling.heartbeat = beating  # type: ignore[method-assign]

    # When the sweep runs within its 300 s
    with contextlib.suppress(SweepFailed):
        sweeper(repair, orphans_take=60).sweep(
            lambda: SWEEPER_TIMEOUT - (repair.clock.now() - start).total_seconds()
        )

    # Then it ended within its invocation, a reserve's worth of calls at most past the point it started its last one
    assert repair.clock.now() - start <= timedelta(seconds=SWEEPER_TIMEOUT)
    # and no action it served came after its deadline, nor one that lapsed unserved while one with a later deadline
    # was served before that lapse
    assert all(when <= deadlines[token] for token, when in served)
    first_served = dict(reversed(served))
    for token, deadline in deadlines.items():
        if token in first_served or deadline > repair.clock.now():
            continue
        later = [
            other for other, when in first_served.items() if when < deadline and deadlines[other] > deadline
        ]
        assert not later, (token, later[:3])
