"""A hook notification that pairs one instance with another instance's live token: AWS documents
RecordLifecycleActionHeartbeat and CompleteLifecycleAction as acting "for the specified token or instance", and
does not say whether it refuses a token named with another instance than its action's. The sandbox, told to
take the token alone (``token_checked_against_instance=False``), shows that nodecycle does not depend on it:
the instance in service is left untouched, and the other instance's action is not completed for it."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from nodecycle.domain.model import LifecycleRecord
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.records import TERMINATING
from tests.integration.lifecycle.harness import (
    held_by_a_budget,
    node_of,
    records,
    running,
    terminate_action,
    wait_for,
)
from tests.integration.lifecycle.test_forged_notifications import finished, taken

pytestmark = pytest.mark.slow

HEARTBEAT_TIMEOUT = 300  # the sandbox hooks' (harness.running)


def refused_or_unknown(sandbox: Sandbox, instance: str, token: str) -> LifecycleRecord | None:
    """What intake made of the notification naming ``instance`` with ``token``, which the other instance's own
    lifecycle holds: refused (None: no record, the token is held by the lifecycle that took it first and Auto
    Scaling confirms) when that lifecycle was taken in first; else its lifecycle, ended as an unknown action with
    nothing completed (the instance's own event then took the token from it)."""
    journal = sandbox.runner.journal
    journal.wait_until(lambda: taken(journal.invocations("IntakeFunction"), token, TERMINATING), 30)
    if records(sandbox).get(f"{instance}/terminate/{token}") is None:
        return None
    record = finished(sandbox, instance, token)
    assert (record.outcome, record.completed_at) == ("unknown-action", None)
    return record


def notify(sandbox: Sandbox, instance: str, token: str, age: timedelta) -> None:
    """A terminate notification on the intake queue, well formed, dated ``age`` ago."""
    body = {
        "Origin": "AutoScalingGroup",
        "Destination": "EC2",
        "LifecycleHookName": "nodecycle-terminate",
        "AccountId": "123456789012",
        "RequestId": str(uuid.uuid4()),
        "LifecycleTransition": TERMINATING,
        "AutoScalingGroupName": sandbox.asg.name,
        "Service": "AWS Auto Scaling",
        "Time": (datetime.now(UTC) - age).isoformat(),
        "EC2InstanceId": instance,
        "LifecycleActionToken": token,
    }
    queue = sandbox.runner.queue("IntakeQueue").url
    sandbox.client("sqs").send_message(QueueUrl=queue, MessageBody=json.dumps(body))


@pytest.mark.parametrize(
    "age",
    [
        pytest.param(timedelta(0), id="fresh"),
        # dated a few seconds before its heartbeat deadline: intake heartbeats such a late action at once
        pytest.param(timedelta(seconds=HEARTBEAT_TIMEOUT - 5), id="late"),
    ],
)
def test_an_instance_in_service_named_with_another_instances_live_token_is_left_untouched(
    age: timedelta,
) -> None:
    with running(size=2) as sandbox:
        # Given an Auto Scaling that takes a lifecycle call's token alone, whatever instance is named with it
        sandbox.aws.configure(token_checked_against_instance=False)
        # And a terminating instance whose drain is held by a pod its budget will not let go (its action
        # live, its token known to anyone who reads the intake queue or its dead letters)
        _, victim = held_by_a_budget(sandbox)
        (bystander,) = [i for i in sandbox.asg.in_state("InService") if i != victim]
        bystander_node = node_of(sandbox, bystander)
        pods_before = sorted(
            p["metadata"]["name"]
            for p in sandbox.kube.objects("pods")
            if p["spec"].get("nodeName") == bystander_node
        )
        sandbox.asg.terminate(victim)
        action = wait_for(lambda: terminate_action(sandbox, victim), 30, "the terminate action")
        writes_before = len(sandbox.kube.history())

        # When a notification names the instance in service with that token
        notify(sandbox, bystander, action.token, age)

        # Then it is refused at intake (the token is the terminating instance's lifecycle's), or, taken in before
        # that one, its lifecycle ends as an unknown action, nothing completed
        refused_or_unknown(sandbox, bystander, action.token)
        # And the instance in service was never cordoned nor drained: its node unwritten, its pods where
        # they were (joined by those evicted from the terminating one), and it stays in service
        writes = sandbox.kube.history()[writes_before:]
        assert [
            w for w in writes if w.kind == "Node" and w.name == bystander_node and w.source == "api"
        ] == []
        pods_after = sorted(
            p["metadata"]["name"]
            for p in sandbox.kube.objects("pods")
            if p["spec"].get("nodeName") == bystander_node
        )
        assert set(pods_before) <= set(pods_after)
        assert bystander in sandbox.asg.in_state("InService")
        # And the terminating instance's action was not completed for it: it still waits on its own drain
        held = terminate_action(sandbox, victim)
        assert held is not None
        assert held.transition == TERMINATING
        assert held.active
        assert victim in sandbox.asg.in_state("Terminating:Wait")


def test_such_a_pair_dated_near_its_global_timeout_completes_no_other_instances_action() -> None:
    with running(size=2) as sandbox:
        # Given an Auto Scaling that takes a call's token alone, and a terminating instance whose drain is
        # held by a pod its budget will not let go
        sandbox.aws.configure(token_checked_against_instance=False)
        _, victim = held_by_a_budget(sandbox)
        (bystander,) = [i for i in sandbox.asg.in_state("InService") if i != victim]
        bystander_node = node_of(sandbox, bystander)
        sandbox.asg.terminate(victim)
        action = wait_for(lambda: terminate_action(sandbox, victim), 30, "the terminate action")
        writes_before = len(sandbox.kube.history())

        # When a notification pairs the instance in service with that token, dated half a minute before
        # its global timeout (100 heartbeat timeouts): the engine's guard completes such an action at once,
        # before any step that would confirm it
        notify(sandbox, bystander, action.token, timedelta(seconds=100 * HEARTBEAT_TIMEOUT - 30))

        # Then its lifecycle ends with nothing completed for it: the terminating instance's action still waits
        # on its own drain, and the instance in service was not touched
        record = refused_or_unknown(sandbox, bystander, action.token)
        held = terminate_action(sandbox, victim)
        assert held is not None
        assert held.active, f"the terminate action of {victim} was settled: {held}"
        assert victim in sandbox.asg.in_state("Terminating:Wait")
        assert record is None or not record.action_confirmed
        writes = sandbox.kube.history()[writes_before:]
        assert [
            w for w in writes if w.kind == "Node" and w.name == bystander_node and w.source == "api"
        ] == []
        assert bystander in sandbox.asg.in_state("InService")


def test_such_a_pair_taken_in_before_the_true_event_ends_as_an_unknown_action_not_a_global_timeout() -> None:
    with running(size=2) as sandbox:
        # Given an Auto Scaling that takes a call's token alone, and a terminating instance whose drain is
        # held by a pod its budget will not let go, whose own event has not reached intake yet (its rule
        # disabled: the order a busy intake queue can take them in)
        sandbox.aws.configure(token_checked_against_instance=False)
        _, victim = held_by_a_budget(sandbox)
        (bystander,) = [i for i in sandbox.asg.in_state("InService") if i != victim]
        sandbox.client("events").disable_rule(
            Name=f"{sandbox.options.stack_name}-IntakeFunctionLifecycleActions"
        )
        sandbox.asg.terminate(victim)
        action = wait_for(lambda: terminate_action(sandbox, victim), 30, "the terminate action")

        # When the forged pair, dated half a minute before its global timeout, is taken in first
        notify(sandbox, bystander, action.token, timedelta(seconds=100 * HEARTBEAT_TIMEOUT - 30))

        # Then its lifecycle ends as the unknown action it is (its page, LifecycleActionsUnknown), not as an
        # action settled near its global timeout (GlobalTimeoutsNear: an operator would look for a stalled
        # drain that never was), with nothing completed
        record = finished(sandbox, bystander, action.token)
        assert (record.outcome, record.completed_at) == ("unknown-action", None), record
        assert not record.action_confirmed
        # And the terminating instance's action still waits on its own drain
        held = terminate_action(sandbox, victim)
        assert held is not None
        assert held.active, f"the terminate action of {victim} was settled: {held}"
        assert bystander in sandbox.asg.in_state("InService")
