"""The lifecycles' keep-alive times an action's heartbeats by its hook's heartbeat timeout as Auto Scaling tells it
now, not only by the one its record took at intake: RecordLifecycleActionHeartbeat "extends the timeout by the length
of time defined using the PutLifecycleHook API call", so a heartbeat after an operator lowered the timeout keeps the
action alive that much less (tests/integration/lifecycle/test_stalled_queue_hook_timeout_lowered.py shows it on the
sandbox)."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.catalog import LifecycleHooks
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import Transition
from nodecycle.domain.ports.lifecycle import Hook
from nodecycle.domain.sweep.lifecycles import LifecycleRepair
from tests.support.fakes import T0
from tests.unit.foundation.test_engine import PLAN, make_record
from tests.unit.sweeper.test_orphans import AMPLE
from tests.unit.sweeper.test_sweeper import Repair

RECORDED = 3600  # the hook's timeout when the action started: its record's
LOWERED = 600  # the hook's since an operator lowered it


def repaired(repair: Repair) -> LifecycleRepair:
    """The repair with the hooks as Auto Scaling tells them (the sweeper's catalog)."""
    repair.hooks = LifecycleHooks(repair.autoscaling, repair.clock)
    return repair.part()


def lowered_since_the_last_heartbeat(repair: Repair) -> str:
    """A stalled drain whose record took a 3600 s timeout, last heartbeated at T0 + 100 s (the hook's timeout lowered
    to 600 s just before: Auto Scaling's deadline T0 + 700 s, the record's T0 + 3700 s); its id."""
    repair.autoscaling.action_timeout = LOWERED
    repair.autoscaling.hooks[("nodes", "terminate")] = Hook(Transition.TERMINATING, LOWERED)
    beat = T0 + timedelta(seconds=100)
    repair.autoscaling.renewed["token"] = beat
    record = make_record(
        PLAN, heartbeat_timeout=RECORDED, heartbeat_deadline=beat + timedelta(seconds=RECORDED), node="n1"
    )
    assert repair.records.create(record)
    return record.id


def test_a_sweep_heartbeats_an_action_by_its_hooks_lowered_timeout_and_records_it() -> None:
    # Given an action whose hook's timeout was lowered before its last heartbeat, and a sweep 400 s after that
    # heartbeat: by the record, its deadline is an hour away, beyond the next sweeps
    repair = Repair()
    record_id = lowered_since_the_last_heartbeat(repair)
    repair.clock.current = T0 + timedelta(seconds=500)

    # When the sweep runs
    counts = repaired(repair)(list(repair.records.open_records("stack-a")), repair.clock.now(), AMPLE)

    # Then the action is heartbeated now, before Auto Scaling's deadline (T0 + 700 s), which the next sweep would
    # come after, and its record times the next heartbeats (the engine's and the sweeps') by the hook's timeout
    assert counts["LifecyclesKeptAlive"] == 1
    assert repair.autoscaling.expires_at("token") > repair.clock.now()
    kept = repair.records.get(record_id)
    assert kept is not None
    assert kept.heartbeat_timeout == LOWERED
    assert kept.heartbeat_deadline == repair.clock.now() + timedelta(seconds=LOWERED)


def test_without_the_hooks_an_action_is_heartbeated_by_its_records_timeout() -> None:
    # Given the same action, and the group's hooks that cannot be read (throttled past the client's retries)
    repair = Repair()
    record_id = lowered_since_the_last_heartbeat(repair)
    repair.clock.current = T0 + timedelta(seconds=500)

    def throttled(group: str) -> dict[str, Hook]:
        raise TransientError("reading a group's lifecycle hooks: Throttling: Rate exceeded")

    repair.autoscaling.hooks_of = throttled  # type: ignore[method-assign]

    # When the sweep runs, Then it times the action by its record, as before the read (nothing heartbeated, the
    # record unchanged), and the sweep itself does not fail for the read
    counts = repaired(repair)(list(repair.records.open_records("stack-a")), repair.clock.now(), AMPLE)
    assert counts["LifecyclesKeptAlive"] == 0
    assert repair.autoscaling.heartbeats == []
    kept = repair.records.get(record_id)
    assert kept is not None
    assert kept.heartbeat_timeout == RECORDED


def test_a_raised_timeout_is_not_taken() -> None:
    # Given an action whose hook's timeout was raised since its record took it, and a sweep within the record's
    # heartbeat horizon (the next sweep may come after its deadline by the record)
    repair = Repair()
    repair.autoscaling.hooks[("nodes", "terminate")] = Hook(Transition.TERMINATING, 7200)
    record = make_record(PLAN, node="n1")  # (300 s: its deadline T0 + 300 s)
    assert repair.records.create(record)
    repair.clock.current = T0 + timedelta(seconds=200)

    # When the sweep runs, Then the action is heartbeated by the record's shorter timeout
    repaired(repair)(list(repair.records.open_records("stack-a")), repair.clock.now(), AMPLE)
    assert repair.autoscaling.heartbeats == [record.action]
    kept = repair.records.get(record.id)
    assert kept is not None
    assert kept.heartbeat_timeout == record.heartbeat_timeout
