"""The sweep's keep-alive that finds an action gone counts ``LifecycleActionsExpired`` once its commit past it lands
(``engine.gone_counted``, from ``LifecycleRepair``). A commit that lands with its answer lost and then raises (a 500 at
every attempt after the first landed; a retry after a read timeout the sweep's time does not allow) is read back, as
the engine's own commit is (``StepEngine``): the next sweep reads the record already past the action (its outcome
unchanged by its write) and counts nothing."""

from __future__ import annotations

import contextlib

from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import LifecycleRecord, Step
from tests.unit.foundation.test_engine import PLAN, make_record
from tests.unit.sweeper.test_sweeper import INTERVAL, MARGIN, Repair


def test_a_sweeps_commit_past_a_gone_action_that_landed_with_its_answer_lost_pages_it_once() -> None:
    # Given a drain at its eviction whose action is gone, due at a sweep's keep-alive, whose commit past the action
    # lands but raises
    repair = Repair()
    repair.autoscaling.active = False
    drain = make_record(PLAN, Step.EVICT, node="n1")
    repair.records.create(drain)
    repair.clock.current = drain.heartbeat_deadline - MARGIN
    commit = repair.records.commit

    def landed_answer_lost(record: LifecycleRecord, expected_seq: int) -> bool:
        repair.records.commit = commit  # type: ignore[method-assign]
        assert commit(record, expected_seq)
        raise TransientError("writing a lifecycle record: InternalServerError")

    repair.records.commit = landed_answer_lost  # type: ignore[method-assign]

    # When that sweep and the next run
    with contextlib.suppress(Exception):  # (the part's failure: the sweeper logs it)
        repair.run()
    repair.clock.current += INTERVAL
    repair.run()

    # Then the lifecycle is past its action, paged once
    moved = repair.records.get(drain.id)
    assert moved is not None
    assert moved.outcome == "action-expired"
    assert repair.metrics.counts["LifecycleActionsExpired"] == 1
