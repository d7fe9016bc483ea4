"""A lifecycle the sweep could not repair is counted once in what the failed sweep says: one whose confirmation's
look failed (counted as the keep-alive falls back to a heartbeat by its instance) and whose heartbeat then failed too
was counted twice, the sweep saying "2 lifecycles could not be repaired" for one."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import ActionRef, Step
from nodecycle.domain.sweep.sweeper import SweepFailed
from tests.unit.foundation.test_engine import PLAN, make_record
from tests.unit.sweeper.test_sweeper import Repair


def test_a_lifecycle_whose_look_and_heartbeat_both_failed_is_one_that_could_not_be_repaired() -> None:
    # Given one lifecycle intake wrote, no step of it run yet, due a heartbeat
    repair = Repair()
    repair.autoscaling.action_timeout = 600
    record = make_record(PLAN, Step.ACQUIRE_SLOT, verified_at=None, heartbeat_timeout=600).model_copy(
        update={"heartbeat_deadline": make_record(PLAN).started_at + timedelta(seconds=100)}
    )
    assert repair.records.create(record)
    repair.autoscaling.issue(record.token, record.instance_id, hook=(record.group, record.hook))

    # ... and Auto Scaling throttling both the look where its instance is and the heartbeat by its instance
    def throttled(action: ActionRef) -> bool:
        raise TransientError("Throttling: Rate exceeded")

    repair.autoscaling.confirm = throttled  # type: ignore[method-assign]
    repair.autoscaling.heartbeat = throttled  # type: ignore[method-assign]

    # When the sweep runs, Then it fails saying one lifecycle could not be repaired
    with pytest.raises(SweepFailed, match=r"^1 lifecycles could not be repaired"):
        repair.run()
