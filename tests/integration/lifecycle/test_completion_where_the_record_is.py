"""Completion runs on the function that has the record: a launch that only needs an address is assigned and
completed by the eip function, and the drain function (with its Kubernetes client) is never invoked."""

from __future__ import annotations

import pytest

from nodecycle.domain.model import Transition
from nodecycle_sandbox.aws.records import LAUNCHING
from tests.integration.lifecycle.harness import record_of, running

pytestmark = pytest.mark.slow


def test_a_launch_with_an_address_and_no_readiness_gate_never_invokes_the_drain_function() -> None:
    # Given a stack that gives launching instances an address and has no readiness gate
    parameters = {"EipMode": "allocate", "ReadinessGate": "false"}
    # When two instances launch through the launch hook (running() waits until they are in service)
    with running(parameters=parameters, size=2, workloads=None) as sandbox:
        launches = [a for a in sandbox.aws.actions() if a.transition == LAUNCHING]

        # Then each launch action was completed with CONTINUE, by the eip function's own completion
        assert len(launches) == 2
        assert all((a.result, a.active) == ("CONTINUE", False) for a in launches)
        for action in launches:
            record = record_of(sandbox, action.instance_id, Transition.LAUNCHING)
            assert record.finished
            assert record.allocation_id is not None
        journal = sandbox.runner.journal

        # (the runner journals an invocation once it has returned: the instance may be in service, and its
        # record finished, a moment before the invocation that completed it is on record)
        def completions() -> int:
            return journal.api_calls("EipFunction")["autoscaling.CompleteLifecycleAction"]

        journal.wait_until(lambda: completions() >= 2, timeout=30)
        assert completions() == 2
        # And the drain function was never invoked at all
        assert journal.invocations("DrainFunction") == []
