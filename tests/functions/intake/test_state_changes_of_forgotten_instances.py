"""State changes delivered after EC2 has forgotten their instance. EC2 describes a terminated instance only for a
while ("Recently terminated instances might appear in the returned results. This interval is usually less than
one hour": DescribeInstances, EC2 API reference), and never an instance of another account. The state-change rule
takes every instance of the account and region, so a backlog of an hour or more (Lambda's retries of an
asynchronous event, a dead-letter queue redriven) brings the terminations of instances that were never this
stack's, as many as the account had: intake acknowledges those quietly, and still cleans up after its own."""

from __future__ import annotations

import time
from types import ModuleType

import boto3
import pytest
from moto.core import DEFAULT_ACCOUNT_ID
from moto.ec2.models import ec2_backends

from nodecycle.domain.model import Step
from nodecycle_sandbox.aws import ec2_instances
from nodecycle_sandbox.aws.install import install
from tests.functions.intake.conftest import make_group
from tests.functions.intake.test_disruption_intake import (
    ec2_event,
    launch,
    records,
    stopped_once_and_started_again,
    work,
)
from tests.support.emf import metric_counts
from tests.support.events import sqs_event
from tests.support.functions import LambdaContext
from tests.support.stack import Stack


def _forgetting_fast() -> None:
    """EC2 as the sandbox emulates it, which lists a terminated instance for a while (here: a fifth of a second)."""
    install()
    ec2_instances.set_retention(ec2_backends[DEFAULT_ACCOUNT_ID]["eu-west-1"], 0.2)


def _rejected(output: str) -> dict[str, float]:
    return {
        dict(dimensions).get("reason", ""): count
        for (name, dimensions), count in metric_counts(output).items()
        if name == "LifecycleEventsRejected"
    }


@pytest.mark.parametrize("state", ["shutting-down", "terminated", "stopped"])
def test_a_late_state_change_of_an_instance_never_this_stacks_pages_nobody(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str], state: str
) -> None:
    # Given an instance of a group this stack does not manage, terminated, and forgotten by EC2 since
    _forgetting_fast()
    make_group("nodes-other")
    instance = launch("nodes-other")
    boto3.client("ec2").terminate_instances(InstanceIds=[instance])
    time.sleep(0.3)

    # When its state change arrives after that (a retried delivery, a dead-letter redrive)
    response = intake_fn.handler(
        sqs_event(ec2_event("eventbridge-instance-stopped.json", instance, state=state)), LambdaContext()
    )

    # Then it is acknowledged: nothing written, no retry, and no rejection (RejectedEventsAlarm would page for
    # every instance the account terminated during the backlog)
    assert response == {"batchItemFailures": []}
    assert records() == []
    assert _rejected(capsys.readouterr().out) == {}


def test_a_late_termination_of_an_instance_this_stack_knows_still_frees_what_it_held(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an instance of a managed group that was stopped outside the hooks (its lifecycle over: a record of
    # this stack names it), then started again, then terminated outside the hooks, and forgotten by EC2 since
    _forgetting_fast()
    instance, first = stopped_once_and_started_again(intake_fn, stack)
    boto3.client("ec2").terminate_instances(InstanceIds=[instance])
    time.sleep(0.3)

    # When its termination's state change arrives after that
    terminated = ec2_event("eventbridge-instance-stopped.json", instance, state="terminated")
    terminated["id"] = "0f4f1f0e-3b8e-4d7c-a1f2-7a6c5e4d3b21"
    intake_fn.handler(sqs_event(terminated), LambdaContext())

    # Then its lifecycle starts over for the termination: its slot and annotations freed at once, not left to
    # the sweeper's next pass; and nothing is rejected
    (again,) = records()
    assert (again["token"], again["step"], again["group"]) == (
        terminated["id"],
        Step.FORGET_NODE.value,
        first["group"],
    )
    assert [m["step"] for m in work(stack.drain_queue)] == [Step.FORGET_NODE.value]
    assert _rejected(capsys.readouterr().out) == {}
