"""Once the look where an unconfirmed action's instance is fails, the rest of that sweep heartbeats its unconfirmed
actions without one (each look would spend the client's retries on a call refused the same way). The sweeper's
parts live as long as its container (``wiring.sweeper`` is cached): the next sweep, in the same container, must look
again, or a look that failed once would leave every later sweep of the container heartbeating without the look that
keeps a token of another group's action from being kept alive for this stack (invariant 8)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import ActionRef, Step
from nodecycle.domain.sweep.sweeper import SweepFailed
from tests.unit.foundation.test_engine import PLAN, make_record
from tests.unit.review.test_rsweep_unconfirmed_look_throttled import INTERVAL
from tests.unit.sweeper.test_orphans import AMPLE
from tests.unit.sweeper.test_sweeper import Repair


def test_the_sweep_after_one_whose_look_failed_looks_again_in_the_same_container() -> None:
    # Given two lifecycles intake wrote, no step of them run (their queue stalled), of hooks of 600 s
    repair = Repair()
    repair.autoscaling.action_timeout = 600
    for n in range(2):
        instance, token = f"i-{n:017x}", f"token-{n}"
        repair.autoscaling.issue(token, instance, hook=("nodes", "terminate"))
        begun = make_record(PLAN, Step.ACQUIRE_SLOT, verified_at=None, heartbeat_timeout=600)
        assert repair.records.create(
            begun.model_copy(
                update={
                    "id": f"{instance}/terminate/{token}",
                    "instance_id": instance,
                    "token": token,
                    "heartbeat_deadline": begun.started_at + timedelta(seconds=600),
                }
            )
        )
    repair.clock.advance(60)
    looks: list[str] = []
    throttled = [True]
    confirm = repair.autoscaling.confirm

    def look(action: ActionRef) -> bool:
        looks.append(action.instance_id)
        if throttled[0]:
            raise TransientError("reading an instance's group and lifecycle state: Throttling: Rate exceeded")
        return confirm(action)

    repair.autoscaling.confirm = look  # type: ignore[method-assign]
    part = repair.part()  # (one for the container's sweeps, as the wiring caches it)

    # When a sweep runs while the look is throttled (one look, then the other action heartbeated without one)
    with pytest.raises(SweepFailed):
        part(list(repair.records.open_records("stack-a")), repair.clock.now(), AMPLE)
    assert len(looks) == 1

    # ... and the next sweep of the same container, the look answered again
    throttled[0] = False
    repair.clock.advance(INTERVAL.total_seconds())
    looks.clear()
    part(list(repair.records.open_records("stack-a")), repair.clock.now(), AMPLE)

    # Then that sweep looked before each heartbeat
    assert sorted(looks) == [f"i-{n:017x}" for n in range(2)]
