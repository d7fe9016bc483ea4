"""A hook notification forged on the intake queue (anyone allowed to send to it can), dated so that its action's
global timeout is near when it is taken in: the engine's guard completes such an action before any other step,
without asking Auto Scaling whether it is real. Auto Scaling holds no action of its token, so that completion
does nothing; what the plan does after it must do nothing either (invariant 8): here, take back the address of
a running instance (invariant 4)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import boto3
import pytest
from moto.core import DEFAULT_ACCOUNT_ID

from nodecycle.domain.model import global_deadline
from nodecycle.domain.ports.addresses import ALLOCATED_AT_TAG, GROUP_TAG, INSTANCE_TAG, OWNER_TAG
from nodecycle_sandbox.aws import LAUNCHING, AwsControl, install
from tests.functions.intake.conftest import GROUP, HEARTBEAT_TIMEOUT, LAUNCH_HOOK, make_group
from tests.support.events import load_event, sqs_event
from tests.support.functions import LambdaContext, load_function
from tests.support.stack import Stack

OWNER = "stack-a"  # tests/conftest.py's stack


class Events:
    """The default event bus of the Auto Scaling emulation: this test reads nothing from it."""

    def publish(self, event: dict[str, Any]) -> None:
        pass


@pytest.fixture
def control(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[AwsControl]:
    """Auto Scaling with its hooks (the sandbox's emulation on moto), for a stack of Elastic IPs only (no
    cluster: CI runners, NAT-like boxes), whose terminate plan is the release of the address, then the
    completion."""
    monkeypatch.delenv("NODECYCLE_CLUSTER_NAME", raising=False)
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "allocate")
    install()
    control = AwsControl(region="eu-west-1", account=DEFAULT_ACCOUNT_ID)
    control.connect(events=Events(), nodes=None)
    make_group(GROUP)
    yield control
    control.close()


def in_service_with_its_address(control: AwsControl) -> tuple[str, str]:
    """An instance of the managed group in service (its launch completed) and the address its launch gave it
    (tagged as nodecycle tags what it allocates): (instance id, allocation id)."""
    autoscaling = boto3.client("autoscaling")
    autoscaling.set_desired_capacity(AutoScalingGroupName=GROUP, DesiredCapacity=1)
    (launched,) = [a for a in control.actions() if a.transition == LAUNCHING]
    autoscaling.complete_lifecycle_action(
        AutoScalingGroupName=GROUP,
        LifecycleHookName=LAUNCH_HOOK,
        LifecycleActionToken=launched.token,
        LifecycleActionResult="CONTINUE",
    )
    ec2 = boto3.client("ec2")
    allocated_at = datetime.now(UTC) - timedelta(hours=1)
    tags = {
        OWNER_TAG: OWNER,
        INSTANCE_TAG: launched.instance_id,
        GROUP_TAG: GROUP,
        ALLOCATED_AT_TAG: allocated_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    allocation = ec2.allocate_address(
        Domain="vpc",
        TagSpecifications=[
            {"ResourceType": "elastic-ip", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
        ],
    )["AllocationId"]
    ec2.associate_address(AllocationId=allocation, InstanceId=launched.instance_id, AllowReassociation=False)
    return launched.instance_id, allocation


def forged_notification(instance: str, at: datetime) -> dict[str, Any]:
    body = json.loads(load_event("sqs-hook-terminate.json")["Records"][0]["body"])
    return {
        **body,
        "AutoScalingGroupName": GROUP,
        "EC2InstanceId": instance,
        "LifecycleActionToken": str(uuid.uuid4()),  # no hook issued it
        "Time": at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
    }


def run_queue(queue_url: str, function: ModuleType, rounds: int = 5) -> None:
    """Deliver what the queue holds to the function, as Lambda's event source mapping does (deleted once
    handled), until it is empty; a step that waits re-sends its message, hence a bound."""
    sqs = boto3.client("sqs")
    for _ in range(rounds):
        messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=1).get("Messages", [])
        if not messages:
            return
        for message in messages:
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
        function.handler(sqs_event(*[m["Body"] for m in messages]), LambdaContext())


def test_a_forged_terminate_action_near_its_global_timeout_releases_no_address(
    control: AwsControl, stack: Stack
) -> None:
    # Given a running instance of a managed group, in service, with the address its launch gave it
    instance, allocation = in_service_with_its_address(control)
    # and a terminate hook notification sent to the intake queue by someone allowed to send to it: a token no
    # hook issued, dated so that its global timeout is a minute away (within the point where the guard settles)
    now = datetime.now(UTC)
    dated = now - (global_deadline(now, HEARTBEAT_TIMEOUT) - now) + timedelta(minutes=1)
    intake = load_function("intake")
    forged = forged_notification(instance, dated)
    assert intake.handler(sqs_event(forged), LambdaContext()) == {"batchItemFailures": []}

    # When the eip function runs the lifecycle intake started for it
    run_queue(stack.eip_queue, load_function("eip"))

    # Then the instance keeps its address
    found = boto3.client("ec2").describe_addresses(
        Filters=[{"Name": "allocation-id", "Values": [allocation]}]
    )
    assert [address.get("InstanceId") for address in found["Addresses"]] == [instance]
