"""The sweep's report and the metrics agree on an action the sweep finds gone. A terminate lifecycle whose drain
began may be carried over by its cleanup to the action its instance's hook holds (a crossed lifecycle: its message
named the instance with another's token, whose action ended); its expiry is left untold by the sweep's write
(EXPIRY_UNTOLD) and told by the cleanup, as LifecycleActionsExpired or LifecycleActionsCarriedOver. The report
counted it as expired all the same (``LifecyclesExpired``), a page the metrics did not raise, and for a carried-over
lifecycle one that never happened: it counts it on its own (``LifecyclesExpiryUntold``)."""

from __future__ import annotations

import pytest

from nodecycle.domain.model import EXPIRY_UNTOLD, Step
from tests.unit.foundation.test_engine import PLAN, make_record
from tests.unit.sweeper.test_sweeper import MARGIN, Repair


@pytest.mark.parametrize("drain_began", [True, False], ids=["drain-began", "drain-not-begun"])
def test_an_action_found_gone_is_reported_expired_only_when_the_metrics_page_it(drain_began: bool) -> None:
    # Given a stalled drain at its eviction whose action Auto Scaling no longer has (a crossed lifecycle's token
    # completed by the other instance's lifecycle), its drain begun (its cleanup may carry it over) or not
    repair = Repair()
    repair.autoscaling.active = False
    record = make_record(PLAN, Step.EVICT, node="n1")
    if drain_began:
        record = record.model_copy(update={"drain_started_at": record.started_at})
    repair.records.create(record)
    repair.clock.current = record.heartbeat_deadline - MARGIN

    # When the sweeper runs
    counts = repair.run()

    # Then the report counts an expiry exactly when the metrics page one; an expiry left to the cleanup is counted
    # apart, and the lifecycle goes on to that cleanup either way
    moved = repair.records.get(record.id)
    assert moved is not None
    assert (moved.step, moved.outcome) == (Step.CLEANUP, "action-expired")
    assert bool(moved.extra.get(EXPIRY_UNTOLD)) is drain_began
    assert (
        counts["LifecyclesExpired"]
        == repair.metrics.counts["LifecycleActionsExpired"]
        == (0 if drain_began else 1)
    )
    assert counts["LifecyclesExpiryUntold"] == (1 if drain_began else 0)
    assert repair.metrics.counts["LifecycleActionsCarriedOver"] == 0  # (the cleanup tells it, not the sweep)
