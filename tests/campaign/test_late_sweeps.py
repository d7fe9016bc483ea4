"""The world's late sweeps (an address's judgement once the sweep grace has passed, and hours later while an address
whose lock was lifted is still there) run stack a's sweeper with its clock moved ahead. A sweep then resumes what it
finds overdue: the step it re-sends is due at the sweeper's now. Handled by functions whose clocks had not moved,
that step was due hours ahead, and they sent it again delayed (900 s, SQS's most, then again): the messages outlived
the scenario in stack a's work queues. Seed 3 run in one world: scenario 1's late sweeps (its address locked, an
EipFunction invocation of a state-change lifecycle killed) resumed that lifecycle at +360 s and +3,600 s, and
scenario 2's replay found a's EipQueue holding 3 delayed messages 30 s after its replays were handled ("the
replayed work not handled in 30s (3 of 3)"). So the work a late sweep sends is handled as late as the sweep: every
function's clock moved on by as much until the stack's work queues are empty again, as the replays' is; and only once
the work under way has settled on the present clock (a completer's claim watched for a minute, sent just before the
scenario was quiescent, is none of the sweep's work)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from nodecycle_sandbox.chaos import world
from nodecycle_sandbox.chaos.world import ScenarioRun
from nodecycle_sandbox.faults import Fault

QUEUES = ("DrainQueue", "EipQueue", "WakeQueue")


class _Faults:
    def __init__(self, events: list[Any]) -> None:
        self.events = events
        self.armed: list[Fault] = []

    def arm(self, faults: list[Fault], seed: int) -> None:
        self.armed = list(faults)
        self.events.append(("armed", tuple((f.kind, f.target, f.value, f.limit) for f in faults)))

    def disarm(self) -> None:
        self.armed = []
        self.events.append("disarmed")


class _Sqs:
    """Stack a's work queues: the EipQueue holds ``waiting`` messages (delayed) for its first reads, then none."""

    def __init__(self, events: list[Any], faults: _Faults, waiting: list[int]) -> None:
        self._events = events
        self._faults = faults
        self._waiting = waiting

    def get_queue_attributes(self, QueueUrl: str, AttributeNames: list[str]) -> dict[str, Any]:
        count = self._waiting.pop(0) if self._waiting and QueueUrl == "url:EipQueue" else 0
        if QueueUrl == "url:EipQueue":
            self._events.append(("read", count, bool(self._faults.armed)))
        return {"Attributes": {"ApproximateNumberOfMessagesDelayed": str(count)}}


def _late_sweep(
    waiting: list[int], queued: int = 0, intake_travel: float = 0.0
) -> tuple[list[Any], list[str]]:
    """The late sweep of a fake world; ``queued``: older sweeps queued behind the sweeper's concurrency of one, which
    end, one a look, after it is fired and before it does; ``intake_travel``: how far the world moved the intake's
    clock for the intake messages it delivered again early (see ScenarioRun._redeliver_retried)."""
    events: list[Any] = []
    faults = _Faults(events)
    ended: list[SimpleNamespace] = []  # the sweeps' invocations, as the journal tells them once they end
    behind: list[str] = []

    def fire(function: str) -> str:
        behind.extend(f"older-{n}" for n in range(queued))
        behind.append("late")
        events.append("swept")
        return "late"

    def invocations(function: str) -> list[SimpleNamespace]:
        if behind:
            ended.append(SimpleNamespace(event={"id": behind.pop(0)}))
            events.append(("ended", ended[-1].event["id"]))
        return list(ended)

    runner = SimpleNamespace(
        fire_schedule=fire,
        journal=SimpleNamespace(invocations=invocations),
        queue=lambda queue_id: SimpleNamespace(url=f"url:{queue_id}"),
    )
    sqs = _Sqs(events, faults, waiting)
    run = object.__new__(ScenarioRun)  # (only its world's runner of stack a and the sandbox are used)
    run.world = SimpleNamespace(runners={"a": runner})  # type: ignore[assignment]
    run.scenario = SimpleNamespace(stacks=("a",))  # type: ignore[assignment]
    run.box = SimpleNamespace(runner_faults=faults, client=lambda service: sqs)  # type: ignore[assignment]
    run.intake_travel = intake_travel
    left = run._late_sweep(3600.0)
    return events, left


def test_the_work_a_late_sweep_sends_is_handled_as_late_as_the_sweep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(world, "LATE_SWEEP_LOOK", 0.01)
    # Given stack a's work queues empty before the sweep, and its EipQueue holding a message the late sweep resumed
    # for its first two looks after it, then none
    events, left = _late_sweep([0, 1, 1])

    # Then every function's clock was moved on by the sweep's travel (not only the sweeper's), from before the sweep
    # until the queue was empty, and the sweep settled
    assert events == [
        ("read", 0, False),
        ("armed", (("time-travel", "*", 3600.0, None),)),
        "swept",
        ("ended", "late"),
        ("read", 1, True),
        ("read", 1, True),
        ("read", 0, True),
        "disarmed",
    ]
    assert left == []


def test_work_a_late_sweep_left_in_the_queues_is_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(world, "LATE_SWEEP_LOOK", 0.01)
    monkeypatch.setattr(world, "LATE_SWEEP_SETTLE", 0.05)
    # Given stack a's EipQueue empty before the sweep, and never again after it
    events, left = _late_sweep([0] + [2] * 1000)

    # Then the sweep's work is told unsettled, by queue, and the clocks moved back
    assert left == ["the late sweep's work (+3600 s) not handled in 0s", "a's EipQueue: 2 messages"]
    assert events[-1] == "disarmed"


def test_the_clocks_move_for_a_late_sweep_only_once_the_work_under_way_has_settled_on_the_present_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(world, "LATE_SWEEP_LOOK", 0.01)
    # Given stack a's EipQueue holding a message for the first two looks (a completer's claim watched until its
    # invocation may have ended, or an invocation under way on the present clock), then none
    events, left = _late_sweep([1, 1, 0, 0])

    # Then the clocks were moved, and the sweep fired, only once that work was over. Seed 3's scenarios 0-1 in one
    # world on a loaded machine: quiescent 4 s after a completion whose second delivery had met its completer's claim
    # and sent a watch delayed 55 s (until the completer's 60 s invocation may have ended), the late sweep found that
    # watch in a's EipQueue for its whole 30 s ("the late sweep's work (+360 s) not handled in 30s", the scenario not
    # quiescent, and its locked address, the later late sweeps not run, judged leaked). And an invocation begun before
    # the move, on the present clock, that meets a lifecycle the late sweep resumed (due at the sweeper's now), finds
    # it due that far ahead and sends it again delayed by as much.
    assert events == [
        ("read", 1, False),
        ("read", 1, False),
        ("read", 0, False),
        ("armed", (("time-travel", "*", 3600.0, None),)),
        "swept",
        ("ended", "late"),
        ("read", 0, True),
        "disarmed",
    ]
    assert left == []


def test_work_under_way_that_does_not_settle_before_a_late_sweep_is_told_and_no_clock_moves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(world, "LATE_SWEEP_LOOK", 0.01)
    monkeypatch.setattr(world, "WORK_UNDER_WAY_SETTLE", 0.05)
    # Given stack a's EipQueue that never empties
    events, left = _late_sweep([2] * 1000)

    # Then no clock moved and no sweep fired, and the work left is told, by queue
    assert left == [
        "the work under way before the late sweep (+3600 s) not settled in 0s",
        "a's EipQueue: 2 messages",
    ]
    assert "swept" not in events
    assert not any(isinstance(e, tuple) and e[0] == "armed" for e in events)


def test_a_late_sweep_waits_for_its_own_sweep_not_an_older_one_that_ends_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(world, "LATE_SWEEP_LOOK", 0.01)
    # Given two older scheduled sweeps queued behind the sweeper's concurrency of one (the schedule's every 12 s, and
    # the final sweep's, on a loaded machine), which end after the late sweep is fired and before it does
    events, left = _late_sweep([0, 0], queued=2)

    # Then the late sweep's work is judged only once its own sweep has ended: an older one's end is not it (seed 3's
    # scenario 1 in one world: the final sweep, "the last word with no fault", ran as late as the late sweep, 364 s,
    # after the world had counted an older one's end as its own and judged the scenario quiescent)
    assert events == [
        ("read", 0, False),
        ("armed", (("time-travel", "*", 3600.0, None),)),
        "swept",
        ("ended", "older-0"),
        ("ended", "older-1"),
        ("ended", "late"),
        ("read", 0, True),
        "disarmed",
    ]
    assert left == []


def test_work_the_product_delayed_for_the_intakes_own_time_travel_is_waited_for_as_long_before_a_late_sweep(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(world, "LATE_SWEEP_LOOK", 0.01)
    monkeypatch.setattr(world, "WORK_UNDER_WAY_SETTLE", 0.05)
    # Given stack a's work queue holding a message for its first twenty looks (longer than the wait for the work under
    # way), then none
    # When the world had delivered retried intake messages early, the intake's clock moved 30 s ahead for them: the
    # lifecycle an intake took in so is dated that far ahead, and the drain function, its clock not moved, sent its
    # first step again delayed by as much (seed 307's scenario 4: a forged terminate taken in 116 s ahead, its step
    # delayed 116 s in a's DrainQueue, past the 90 s wait; the late sweeps never ran and the address whose lock was
    # lifted was judged leaked)
    events, left = _late_sweep([1] * 20 + [0, 0], intake_travel=30.0)

    # Then the late sweep waited for it, as long as the world moved the intake's clock on, and ran
    assert left == []
    assert "swept" in events

    # And without that time travel the same wait is told as work that did not settle
    _events, left = _late_sweep([1] * 20 + [0, 0])
    assert left[0] == "the work under way before the late sweep (+3600 s) not settled in 0s"
