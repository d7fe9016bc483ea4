"""A launch in the readiness gate whose instance the group terminates (an operator, a scale-in before it was in
service) while a terminate hook holds it running in EC2 (Terminating:Wait: another tool's hook, or a drain waiting
for a budget slot), its launch hook's heartbeat timeout AWS's default (an hour): no heartbeat of the launch is due
before the gate's timeout to find its action gone. At that timeout the gate asks Auto Scaling where the instance is,
as the address step does before it takes an address for a launch that waited: the launch ends as one whose instance
is gone, not as a readiness timeout (ReadinessTimeoutsAlarm pages for nodes that do not come up) completed with the
failure policy's ABANDON for an action Auto Scaling no longer has. On the sandbox, through the functions."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodecycle.domain.model import SETTLED_ELSEWHERE, Transition
from nodecycle_sandbox.aws.group import wait_for
from tests.integration.lifecycle.harness import find_record, running
from tests.integration.lifecycle.test_launch_terminated_while_open import (
    a_launch_in_the_gate,
    ec2_state,
    hooks,
)
from tests.integration.lifecycle.test_lost_aws_answers import log_ends, metrics_since

pytestmark = pytest.mark.slow


def test_a_gate_timing_out_on_an_instance_its_group_terminates_ends_it_as_gone_not_as_a_readiness_timeout(
    tmp_path: Path,
) -> None:
    # Given a launch waiting in the readiness gate (30 s) for a node that never joins, under a launch hook of an
    # hour's heartbeat timeout
    parameters = {"ReadinessTimeoutSeconds": "30"}
    with running(
        parameters=parameters, size=0, hooks=hooks(3600), workloads=None, log_dir=tmp_path
    ) as sandbox:
        launched = a_launch_in_the_gate(sandbox)
        ends = log_ends(tmp_path)

        # When the group terminates its instance, which another tool's hook holds in Terminating:Wait, running
        # in EC2, until after the gate's timeout
        sandbox.asg.terminate(launched, decrement=True)
        wait_for(
            lambda: sandbox.asg.instances().get(launched) == "Terminating:Wait",
            30,
            "the instance terminating",
        )
        launch = wait_for(
            lambda: (
                (r := find_record(sandbox, launched, Transition.LAUNCHING)) is not None and r.finished and r
            ),
            90,
            "the launch to end",
        )

        # Then the launch ended as one whose instance is gone: no readiness timeout counted, no completion
        # asked of an action Auto Scaling ended with the termination
        assert ec2_state(sandbox.client("ec2"), launched) == "running"
        assert sandbox.asg.instances().get(launched) == "Terminating:Wait"
        assert launch.outcome == "instance-gone", launch.outcome
        assert launch.completed_at is None
        assert SETTLED_ELSEWHERE not in launch.extra
        assert metrics_since(tmp_path, ends)["ReadinessTimeouts"] == 0
