"""A drain on the sandbox while the lifecycle table's index of open records lags every write by seconds (the
sandbox's ``dynamodb-index-lag``, armed as the other AWS faults are), and the sweeper runs every 2 s: its sweeps
list the lifecycle missing at first (just written), then at older steps, then open once its action is completed.
The drain goes as ever, completed once, by nodecycle, after the node is drained; no sweep adopts the action as an
orphan, nor counts it expired, from a version the index had not caught up with."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from nodecycle.domain.model import adopted_token
from nodecycle_sandbox.aws.group import wait_for
from nodecycle_sandbox.checks import completed_before_drained
from nodecycle_sandbox.faults import Fault
from tests.integration.lifecycle.harness import (
    records,
    swept_every_two_seconds,
    wait_finished,
    wait_terminated,
)
from tests.integration.lifecycle.test_lost_aws_answers import log_ends, metrics_since

pytestmark = pytest.mark.slow

LAG_SECONDS = 6.0
HEARTBEAT_TIMEOUT = 10


def test_a_drain_swept_from_a_lagging_index_is_completed_once_after_its_drain_and_nothing_counted_expired(
    tmp_path: Path,
) -> None:
    # Given hooks with a 10 s heartbeat timeout (every sweep finds a heartbeat due), a sweeper every 2 s, and the
    # index of open lifecycles lagging each write to the table by 6 s
    with swept_every_two_seconds(HEARTBEAT_TIMEOUT, log_dir=tmp_path) as sandbox:
        victim = sorted(sandbox.asg.in_state("InService"))[0]
        ends = log_ends(tmp_path)
        sandbox.arm_faults([Fault("lag", "dynamodb-index-lag", value=LAG_SECONDS)], seed=1)

        # When the instance terminates, and the sweeps go on past the lag after its lifecycle ended
        sandbox.asg.terminate(victim)
        done = wait_terminated(sandbox, victim, timeout=90)
        finished = wait_finished(sandbox, victim, timeout=60)
        caught_up = time.time() + LAG_SECONDS + 1
        wait_for(
            lambda: any(
                s.started_at > caught_up for s in sandbox.runner.journal.invocations("SweeperFunction")
            ),
            60,
            "a sweep after the index caught up",
        )
        sandbox.disarm_faults()

        # Then the action was completed by nodecycle, once, after the node was drained
        assert (done.outcome, done.completed_by is not None) == ("completed", True)
        assert completed_before_drained(sandbox.kube.history(), [done]) == []
        assert finished.outcome not in ("action-expired", "settled-by-sweeper"), finished
        # and no sweep adopted it (its record missing from the listing) nor counted it expired or stalled (its
        # completion not in the listing yet), though the index lagged behind every write of it
        assert records(sandbox).get(f"{victim}/terminate/{adopted_token('nodecycle-terminate')}") is None
        lagged = [f for f in sandbox.fault_firings() if f.kind == "dynamodb-index-lag"]
        assert len(lagged) >= 3, lagged
        counted = metrics_since(tmp_path, ends)
        assert (
            counted["LifecycleActionsExpired"],
            counted["LifecyclesStalled"],
            counted["LifecyclesAdopted"],
        ) == (
            0,
            0,
            0,
        ), counted
