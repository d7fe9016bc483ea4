"""The lifecycles' repair killed (its Lambda's timeout, out of memory) right after each of its calls in turn, then
the next sweep, a new container, on schedule: whatever the killed sweep began is finished by the next one, or was
harmless (invariants 2 and 5). The settlement at an action's last chance (a read, the heartbeat, the claim, the
completion, its commit, the message on) completes the action once, before its global timeout, counts it near its
global timeout once, and leaves one chain of work; the resume of a lost message (a read, the heartbeat, the move
to a new seq, the message) leaves one message of the record's current seq.

(tests/unit/sweeper/test_sweep_settle_interleavings.py kills one point, the completion call; this walks all.)"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from nodecycle.domain.model import Step
from nodecycle.domain.policy import ActionResult
from tests.unit.foundation.test_engine import PLAN, kept_alive, make_record
from tests.unit.sweeper.test_sweeper import INTERVAL, Killed, Repair, stalled_at_its_last_chance

# The ports' calls the repair makes (each an AWS call on the real adapters)
CALLS = {
    "records": ("get", "commit", "create", "open_records"),
    "autoscaling": ("heartbeat", "confirm", "complete"),
    "queues": ("send",),
}


class Killer:
    """Counts the repair's calls and ends the invocation right after the ``after``-th (0: never)."""

    def __init__(self, after: int = 0) -> None:
        self.after = after
        self.calls: list[str] = []

    def arm(self, repair: Repair) -> list[tuple[object, str]]:
        """Wrap ``repair``'s ports; what to unwrap (each port and method)."""
        wrapped: list[tuple[object, str]] = []
        for port_name, names in CALLS.items():
            port = getattr(repair, port_name)
            for name in names:
                original = getattr(port, name)

                def counted(*args: Any, _original: Any = original, _name: str = name, **kwargs: Any) -> Any:
                    answer = _original(*args, **kwargs)
                    self.calls.append(_name)
                    if len(self.calls) == self.after:
                        raise Killed
                    return answer

                setattr(port, name, counted)
                wrapped.append((port, name))
        return wrapped

    def run(self, repair: Repair) -> None:
        wrapped = self.arm(repair)
        try:
            with contextlib.suppress(Killed):
                repair.run()
        finally:
            for port, name in wrapped:
                delattr(port, name)  # (the instance's own method again)


def calls_of_a_sweep(setup: Callable[[Repair], str]) -> list[str]:
    repair = Repair()
    setup(repair)
    killer = Killer()
    killer.run(repair)
    return killer.calls


def settle_setup(repair: Repair) -> str:
    return stalled_at_its_last_chance(repair)


def resume_setup(repair: Repair) -> str:
    """A drain whose message was lost, overdue, its heartbeat due before the next sweep, far from its global timeout."""
    repair.autoscaling.action_timeout = 600
    record = make_record(PLAN, step=Step.EVICT, node="n1", seq=4, heartbeat_timeout=600)
    repair.clock.current = record.started_at + timedelta(hours=2)
    assert repair.records.create(
        kept_alive(repair.autoscaling, record, repair.clock.now() - timedelta(seconds=100)).model_copy(
            update={"due_at": repair.clock.now() - timedelta(minutes=10)}
        )
    )
    return record.id


SETTLE_CALLS = len(calls_of_a_sweep(settle_setup))
assert calls_of_a_sweep(settle_setup)[:4] == ["open_records", "get", "get", "commit"]  # (the claim: the 4th)
RESUME_CALLS = len(calls_of_a_sweep(resume_setup))


# Killed with its claim's write landed and its answer not back: the claim says the action was counted near its
# global timeout (GlobalTimeoutsNear, once per action), and the count, made once the write is answered, never was.
# (When the write's answer is lost past the call's deadline instead, CallOutOfTime, an exception, the claim is read
# back and counted: test_rsettle_claim_answer_lost.) A kill runs nothing after the write, and nothing written tells
# the next sweep whether the count was made; counted before the write instead, a settlement whose write lost a race
# (two completers at once) would count the action a second time. Closing it takes a mark written after the count
# (a write more per settlement), which trades the page lost here for one counted twice in as narrow a window.
CLAIM_WRITTEN = 4
PAGE_LOST = pytest.mark.xfail(
    strict=True,
    reason="a settlement killed with its claim written, its answer not back, never counts GlobalTimeoutsNear "
    "(a kill runs no code after the write; no record tells the next sweep the count was not made)",
)


@pytest.mark.parametrize(
    "after",
    [
        pytest.param(after, marks=PAGE_LOST) if after == CLAIM_WRITTEN else after
        for after in range(1, SETTLE_CALLS + 1)
    ],
)
def test_a_settlement_killed_after_any_of_its_calls_is_finished_by_the_next_sweep_once(after: int) -> None:
    # Given a stalled drain at the last sweep before its action's global timeout, whose sweep is killed right after
    # its ``after``-th call
    repair = Repair()
    record_id = settle_setup(repair)
    record = repair.records.get(record_id)
    assert record is not None
    killer = Killer(after)
    killer.run(repair)
    assert len(killer.calls) == after  # (the kill point was reached)

    # When the next sweep runs on schedule (a new container), then the drain function runs what was sent on
    repair.clock.advance(INTERVAL.total_seconds())
    repair.run()

    # Then the action was completed once, with the sweeper's result, before its global timeout
    completed = [result for _, result in repair.autoscaling.completed]
    assert completed == [ActionResult.CONTINUE], killer.calls
    settled = repair.records.get(record_id)
    assert settled is not None
    assert settled.completed_at is not None, killer.calls
    assert settled.completed_at < record.global_deadline
    assert settled.step is not Step.COMPLETE, killer.calls  # (past its completion: what follows is sent on)
    # counted near its global timeout once (a page), and what follows the completion sent on once, at its seq
    assert repair.metrics.counts.get("GlobalTimeoutsNear") == 1, killer.calls
    current = [s for s in repair.queues.sent if s.message.seq == settled.seq]
    assert len(current) == 1, (killer.calls, repair.queues.sent)


@pytest.mark.parametrize("after", range(1, RESUME_CALLS + 1))
def test_a_resume_killed_after_any_of_its_calls_leaves_one_message_of_the_current_seq(after: int) -> None:
    # Given a drain whose message was lost, and a sweep killed right after its ``after``-th call
    repair = Repair()
    record_id = resume_setup(repair)
    killer = Killer(after)
    killer.run(repair)
    assert len(killer.calls) == after

    # When the next sweep runs on schedule
    repair.clock.advance(INTERVAL.total_seconds())
    repair.run()

    # Then the lifecycle has one message of its current seq on its way (a message of an older seq arrives stale),
    # and its action is still alive
    current = repair.records.get(record_id)
    assert current is not None
    assert current.step is Step.EVICT
    on_its_way = [s for s in repair.queues.sent if s.message.seq == current.seq]
    assert len(on_its_way) == 1, (killer.calls, repair.queues.sent, current.seq)
    assert repair.autoscaling.expires_at(current.token) > repair.clock.now() + INTERVAL
