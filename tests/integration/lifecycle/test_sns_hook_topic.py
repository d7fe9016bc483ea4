"""Hooks that notify an SNS topic the intake queue is subscribed to (raw message delivery off, SNS's default):
each notification reaches intake in the topic's envelope, and the launch and the termination run through it,
with no EventBridge event to fall back on. The stack's HookNotificationRole may not publish to a topic (SQS
only): the operator gives the hooks a role allowed sns:Publish on it, and the intake queue a policy letting the
topic send to it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.exceptions import ClientError

from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.control import SANDBOX_ACCOUNT
from nodecycle_sandbox.aws.records import LAUNCHING, TERMINATING, ActionRecord
from nodecycle_sandbox.checks import unsettled
from nodecycle_sandbox.runner.journal import Invocation
from tests.integration.lifecycle.harness import running, wait_finished, wait_terminated

pytestmark = pytest.mark.slow

HOOKS = (("nodecycle-launch", LAUNCHING, "ABANDON"), ("nodecycle-terminate", TERMINATING, "CONTINUE"))
ROLE = f"arn:aws:iam::{SANDBOX_ACCOUNT}:role/nodecycle-hook-topic"
STACK_ROLE = f"arn:aws:iam::{SANDBOX_ACCOUNT}:role/nodecycle-HookNotificationRole"


def _subscribe_intake(sandbox: Sandbox) -> str:
    """A topic, the intake queue subscribed to it with a policy letting it in, a role allowed to publish to it."""
    topic: str = sandbox.client("sns").create_topic(Name="nodecycle-hooks")["TopicArn"]
    intake = sandbox.runner.queue("IntakeQueue")
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "sns.amazonaws.com"},
                "Action": "sqs:SendMessage",
                "Resource": intake.arn,
                "Condition": {"ArnEquals": {"aws:SourceArn": topic}},
            }
        ],
    }
    sandbox.runner.sqs.set_queue_attributes(QueueUrl=intake.url, Attributes={"Policy": json.dumps(policy)})
    sandbox.client("sns").subscribe(TopicArn=topic, Protocol="sqs", Endpoint=intake.arn)
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "autoscaling.amazonaws.com"},
                "Action": "sts:AssumeRole",
            }
        ],
    }
    publish = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "sns:Publish", "Resource": topic}],
    }
    sandbox.aws.register_identities(
        roles=[{"arn": ROLE, "trust": trust, "policies": [{"source": "publish", "document": publish}]}],
        keys=[],
    )
    return topic


def _wrapped(invocations: list[Invocation], topic: str) -> list[dict[str, Any]]:
    """The messages intake handled from its queue (not given back) that came in the topic's envelope."""
    found = []
    for invocation in invocations:
        if not (invocation.ok and isinstance(invocation.event, dict)):
            continue
        for record in invocation.event.get("Records", []):
            body = json.loads(record["body"])
            if body.get("TopicArn") == topic and record["messageId"] not in invocation.failures:
                found.append(json.loads(body["Message"]))
    return found


def _launch_of(sandbox: Sandbox, instance: str) -> ActionRecord | None:
    return next(
        (a for a in sandbox.aws.actions() if a.instance_id == instance and a.transition == LAUNCHING), None
    )


def test_a_launch_and_a_termination_notified_through_an_sns_topic_are_drained_and_completed() -> None:
    with running(size=1, workloads=None) as sandbox:
        # Given the group's hooks notifying a topic the intake queue is subscribed to (no raw delivery), and
        # Auto Scaling sending nothing to EventBridge (intake gets the actions by the topic only)
        topic = _subscribe_intake(sandbox)
        sandbox.aws.configure(eventbridge_for_sqs_hooks=False)
        (old,) = sandbox.asg.in_state("InService")
        autoscaling = sandbox.client("autoscaling")

        def put(name: str, transition: str, default_result: str, role: str) -> None:
            autoscaling.put_lifecycle_hook(
                AutoScalingGroupName=sandbox.asg.name,
                LifecycleHookName=name,
                LifecycleTransition=transition,
                HeartbeatTimeout=300,
                DefaultResult=default_result,
                NotificationTargetARN=topic,
                RoleARN=role,
            )

        # (the stack's own hook role may not publish to it: the hook is refused)
        with pytest.raises(ClientError) as refused:
            put(*HOOKS[1], STACK_ROLE)
        assert refused.value.response["Error"]["Code"] == "ValidationError"
        for hook in HOOKS:
            put(*hook, ROLE)
        journal = sandbox.runner.journal

        # When the group launches an instance, then terminates the old one
        sandbox.asg.set_desired(2)
        # (the old instance stays in service: two in service once the launch is; counted on the emulation's
        # records until then, not on a DescribeAutoScalingGroups every 50 ms)
        (new,) = set(sandbox.asg.wait_in_service(2, timeout=90)) - {old}
        sandbox.asg.terminate(old, decrement=True)
        ended = wait_terminated(sandbox, old, 90)

        # Then both actions were completed by a call before their global timeouts, each taken in by intake from
        # the topic's envelope, as were the hooks' two test notifications
        launch = _launch_of(sandbox, new)
        assert launch is not None
        assert unsettled([launch, ended]) == []
        messages = _wrapped(journal.invocations("IntakeFunction"), topic)
        assert [m.get("Event") for m in messages].count("autoscaling:TEST_NOTIFICATION") == 2
        taken = {(m.get("LifecycleActionToken"), m.get("LifecycleTransition")) for m in messages}
        assert {(launch.token, LAUNCHING), (ended.token, TERMINATING)} <= taken
        # And the old instance's lifecycle ended drained
        assert wait_finished(sandbox, old).outcome == "drained"
