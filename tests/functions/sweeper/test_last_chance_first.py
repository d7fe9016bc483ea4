"""The sweeper function on moto: a stalled action at its last chance is settled before the orphans' keep-alive lists
the instances the hooks hold (DescribeAutoScalingGroups, in pages, then a heartbeat per held instance and hook: minutes
with a backlog, each call throttled and retried), so that the settlement comes as early in the sweep as the settlement
point reckons it (``LifecycleRepair.last_chances``), with no call more than the sweep made before."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import boto3

from nodecycle.domain.model import Step
from tests.functions.intake.conftest import HEARTBEAT_TIMEOUT
from tests.functions.sweeper.test_sweeper_function import invocation, kept_to_the_end, record, store
from tests.support.events import load_event
from tests.support.stack import Stack


def test_a_stalled_action_at_its_last_chance_is_settled_before_the_orphans_are_listed(
    sweeper: ModuleType, stack: Stack
) -> None:
    # Given a stalled lifecycle 400 s before its action's global timeout (past the settlement point, 420 s), and one
    # waiting normally
    now = datetime.now(UTC)
    started = now - timedelta(seconds=HEARTBEAT_TIMEOUT * 100 - 400)
    stuck = kept_to_the_end(
        record("i-0aaaaaaaaaaaaaab1", Step.RELEASE_EIP, started + timedelta(minutes=1), started)
    )
    waiting = record("i-0aaaaaaaaaaaaaab2", Step.RELEASE_EIP, now + timedelta(seconds=30), now)
    for item in (stuck, waiting):
        assert store(stack).create(item)
    calls: list[str] = []

    def count(model: Any, **_: Any) -> None:
        calls.append(model.name)

    events = boto3._get_default_session().events  # the adapters' clients are made from it
    events.register("before-call", count, unique_id="tests.OrderOfCalls")
    try:
        # When the scheduled sweep runs
        report = sweeper.handler(load_event("sweeper-schedule.json"), invocation())
    finally:
        events.unregister("before-call", unique_id="tests.OrderOfCalls")

    # Then it settles the action first, before the orphans' listing of the held instances (before: after it)
    assert report["LifecyclesSettled"] == 1
    swept = store(stack).get(stuck.id)
    assert swept is not None
    assert swept.outcome == "settled-by-sweeper"
    assert calls.index("CompleteLifecycleAction") < calls.index("DescribeAutoScalingGroups")
    # with the calls the sweep made before, each as often (measured on the order before: 13)
    assert Counter(calls) == {
        "Query": 1,  # (the open lifecycles, listed once for every part)
        "DescribeLifecycleHooks": 1,  # (once per group and sweep, the orphans' and the lifecycles')
        "GetItem": 3,
        "PutItem": 3,
        "CompleteLifecycleAction": 1,
        "SendMessage": 1,
        "DescribeAutoScalingGroups": 1,
        "DescribeAutoScalingInstances": 1,
        "DescribeAddresses": 1,
    }
