"""What an operator is told when a lifecycle action nodecycle held ends without its completion (invariant 11:
"an alarm fires"), even when no sweep ran while heartbeats were refused or throttled."""

from __future__ import annotations

from tests.functions.test_operations_template import alarms, emitted_dimensions


def test_an_action_that_expired_under_nodecycle_fires_an_alarm() -> None:
    # Given the metric the engine and the sweeper count when Auto Scaling no longer has an action they held
    # (its heartbeat timeout passed: the hook's default result, a node perhaps undrained)
    emitted = emitted_dimensions()["LifecycleActionsExpired"]

    # Then an alarm watches it, with the dimensions it is emitted with, at its first count
    watching = [
        alarm
        for _, alarm in alarms()
        if alarm.get("Namespace") == "NodeCycle" and alarm.get("MetricName") == "LifecycleActionsExpired"
    ]
    assert watching, "no alarm watches LifecycleActionsExpired"
    (alarm,) = watching
    assert frozenset(d["Name"] for d in alarm["Dimensions"]) in emitted
    assert (alarm["Statistic"], alarm["Threshold"], alarm["ComparisonOperator"]) == (
        "Sum",
        0,
        "GreaterThanThreshold",
    )
    assert "Runbook: docs/runbook.md#expired-actions" in alarm["AlarmDescription"]
