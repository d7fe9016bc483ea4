"""A completion claim holds off every other completer until its completer's invocation ends (``until``), when its
call can no longer be on its way. The engine and the sweep wrote it as the time their run began plus the invocation's
time left when they claim: the calls between (the engine's confirmation before the claim; the sweep's heartbeat, read
and confirmation) took that much off it, and under a throttled Auto Scaling that is tens of seconds in which the claim
could be taken over (a watch, a resend) while its completer's call was still in flight: called twice, the first
told "no active lifecycle action" (the false alarm)."""

from __future__ import annotations

from datetime import datetime, timedelta

from nodecycle.domain.completion import CompleteAction
from nodecycle.domain.engine import COMPLETION_CLAIM, Outcome
from nodecycle.domain.model import ActionRef, LifecycleRecord, Step
from nodecycle.domain.sweep.sweep_time import SweepTime
from tests.support.fakes import FakeAutoscaling
from tests.unit.foundation.test_engine import PLAN, Script, World, make_record
from tests.unit.sweeper.test_sweeper import MARGIN, Repair, stalled_at_its_last_chance

THROTTLED = 20.0  # seconds each confirmation takes (Auto Scaling throttled, botocore's retries)


class SlowToConfirm(FakeAutoscaling):
    def confirm(self, action: ActionRef) -> bool:
        self.clock.advance(THROTTLED)
        return super().confirm(action)


def claims_of(records: object) -> list[dict[str, object]]:
    """The claims ``records`` commits, as they are written."""
    claims: list[dict[str, object]] = []
    commit = records.commit  # type: ignore[attr-defined]

    def recording(record: LifecycleRecord, expected_seq: int) -> bool:
        claim = record.extra.get(COMPLETION_CLAIM)
        if isinstance(claim, dict) and claim.get("seq") == record.seq:
            claims.append(claim)
        return bool(commit(record, expected_seq))

    records.commit = recording  # type: ignore[attr-defined]
    return claims


def test_the_engines_claim_is_held_until_its_invocation_ends_after_a_slow_confirmation() -> None:
    # Given a completion no step confirmed, in an invocation of 60 s, whose confirmation before the claim takes 20 s
    world = World()
    world.autoscaling = SlowToConfirm()
    world.autoscaling.clock = world.clock
    world.records.create(make_record(PLAN, Step.COMPLETE, verified_at=None))
    claims = claims_of(world.records)
    ends = world.clock.now() + timedelta(seconds=60)
    engine = world.engine(
        {
            Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics),
            Step.CLEANUP: Script([Outcome.wait(5)]),
        }
    )

    # When it runs
    engine.handle(world.message(), time_left=lambda: (ends - world.clock.now()).total_seconds())

    # Then its claim is held until the invocation's end, not 20 s before it
    (claim,) = claims
    assert datetime.fromisoformat(str(claim["until"])) == ends


def test_the_sweeps_claim_is_held_until_its_invocation_ends_after_a_slow_confirmation() -> None:
    # Given a stalled drain no step confirmed at its last chance, and a sweep of 300 s whose confirmation before its
    # claim takes 20 s
    repair = Repair(autoscaling=SlowToConfirm())
    stalled_at_its_last_chance(repair, verified_at=None)
    claims = claims_of(repair.records)
    ends = repair.clock.now() + timedelta(seconds=300)

    # When it settles it
    repair.part()(
        list(repair.records.open_records("stack-a")),
        repair.clock.now(),
        SweepTime(lambda: (ends - repair.clock.now()).total_seconds(), MARGIN),
    )

    # Then its claim is held until the sweep's invocation ends, not 20 s before it
    (claim,) = claims
    assert datetime.fromisoformat(str(claim["until"])) == ends
