"""Two stacks, one account: a message on stack A's intake queue naming A's own group and hook with the instance
and live token of an action of stack B's group (forged, or B's notification edited and sent to the wrong queue).
If Auto Scaling takes a lifecycle call's token whatever group is named with it (undocumented either way: see
``token_checked_against_group``), nothing A does for that message may reach B's action: neither a heartbeat (an
action kept alive that B's stack is not keeping), nor a completion (B's node terminated under its drain)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.group import GroupSpec
from nodecycle_sandbox.aws.records import TERMINATING
from tests.integration.lifecycle.harness import FAST, node_of, pin, running, terminate_action, wait_for
from tests.integration.lifecycle.test_forged_notifications import finished

pytestmark = pytest.mark.slow

HEARTBEAT_TIMEOUT = 300  # the hooks of both groups (harness.running's and GroupSpec's default)


def notify(sandbox: Sandbox, group: str, instance: str, token: str, age: timedelta) -> None:
    """A terminate notification on stack A's intake queue, well formed, naming ``group``, dated ``age`` ago."""
    body = {
        "Origin": "AutoScalingGroup",
        "Destination": "EC2",
        "LifecycleHookName": "nodecycle-terminate",
        "AccountId": "123456789012",
        "RequestId": str(uuid.uuid4()),
        "LifecycleTransition": TERMINATING,
        "AutoScalingGroupName": group,
        "Service": "AWS Auto Scaling",
        "Time": (datetime.now(UTC) - age).isoformat(),
        "EC2InstanceId": instance,
        "LifecycleActionToken": token,
    }
    queue = sandbox.runner.queue("IntakeQueue").url
    sandbox.client("sqs").send_message(QueueUrl=queue, MessageBody=json.dumps(body))


def test_a_message_naming_this_stacks_group_with_another_stacks_token_neither_heartbeats_nor_completes_it() -> (
    None
):
    # Given stack "nodecycle" (group nodecycle-workers) and stack "nodecycle-b" (group workers-b, the same hook
    # names) in one account, and an Auto Scaling that takes a call's token whatever group is named with it
    with running(parameters=FAST, size=1, workloads=None) as sandbox:
        _, group_b = sandbox.add_stack(
            "nodecycle-b",
            parameters={**FAST, "OwnerId": "nodecycle-b"},
            group=GroupSpec(name="workers-b", size=1),
        )
        assert group_b is not None
        (victim,) = group_b.wait_in_service(1, timeout=90)
        sandbox.aws.configure(token_checked_against_group=False)
        # ...and B draining an instance of its own, held by a pod its budget will not let go (its action live)
        victim_node = node_of(sandbox, victim)
        pin(sandbox, victim_node, namespace="b")
        group_b.terminate(victim)
        action = wait_for(lambda: terminate_action(sandbox, victim), 30, "B's terminate action")

        # When A's intake queue gets a notification naming A's group with that instance and token, dated half a
        # minute before the global timeout of A's hook (100 heartbeat timeouts): late, so intake heartbeats it at
        # once, and the engine's guard completes it before any step confirms it
        notify(
            sandbox,
            sandbox.asg.name,
            victim,
            action.token,
            timedelta(seconds=100 * HEARTBEAT_TIMEOUT - 30),
        )

        # Then A's lifecycle of it ends with nothing completed
        record = finished(sandbox, victim, action.token)
        assert not record.action_confirmed
        # And B's action was neither completed nor heartbeated by A: it still waits on B's drain
        held = terminate_action(sandbox, victim)
        assert held is not None
        assert held.active, f"B's terminate action of {victim} was settled by A: {held}"
        by_a = [sandbox.runner.function_of_access_key(c) for c in held.heartbeat_callers]
        assert [f for f in by_a if f is not None] == [], "B's action heartbeated by A"
        assert held.heartbeat_callers, (
            "no heartbeat told of by the sandbox: the assertion above could not fail"
        )
        assert victim in group_b.in_state("Terminating:Wait")
