"""The emulation in-process under `mock_aws`, with a fake cluster and a recording EventBridge."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodecycle_sandbox.aws import AwsControl, install
from nodecycle_sandbox.aws.group import AutoScalingGroup, GroupSpec, HookSpec, WarmPoolSpec

REGION = "eu-west-1"
RECORDS_TABLE = "records"  # the table of the tests of the sandbox's DynamoDB patches
# moto reads the caller's access key from the request signature: it must look like a real one.
OPERATOR_KEY = "AKIATESTOPERATOR0000"
_LAMBDA_TRUST = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}
    ],
}


def worker_function(timeout: int) -> Any:
    """A function ``worker`` (its role, a handler that does nothing) with ``timeout``, made in moto under an active
    ``mock_aws``; the Lambda client."""
    role = boto3.client("iam", region_name=REGION).create_role(
        RoleName="worker", AssumeRolePolicyDocument=json.dumps(_LAMBDA_TRUST)
    )["Role"]["Arn"]
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as package:
        package.writestr("app.py", "def handler(event, context): return None\n")
    awslambda = boto3.client("lambda", region_name=REGION)
    awslambda.create_function(
        FunctionName="worker",
        Runtime="python3.13",
        Role=role,
        Handler="app.handler",
        Code={"ZipFile": code.getvalue()},
        Timeout=timeout,
    )
    return awslambda


@dataclass
class FakeNodes:
    """A `NodeRegistry` that remembers what the emulation asked of the cluster."""

    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)
    stopped: set[str] = field(default_factory=set)
    terminated: set[str] = field(default_factory=set)

    def add_node(
        self,
        name: str,
        *,
        instance_id: str,
        zone: str,
        ready: bool = True,
        ready_after: float | None = None,
        labels: dict[str, str] | None = None,
        pods_capacity: int = 110,
    ) -> None:
        self.nodes[name] = {
            "instance_id": instance_id,
            "zone": zone,
            "ready": ready,
            "ready_after": ready_after,
        }
        self.nodes[name]["labels"] = labels or {}

    def remove_node(self, name: str) -> None:
        self.nodes.pop(name, None)
        self.removed.append(name)

    def instance_terminated(self, name: str) -> None:
        self.terminated.add(name)

    def instance_stopped(self, name: str) -> None:
        self.stopped.add(name)

    def instance_started(self, name: str) -> None:
        self.stopped.discard(name)

    def instance_resumed(self, name: str) -> None:
        self.stopped.discard(name)

    def instance_rebooting(self, name: str) -> None:
        self.stopped.add(name)

    def node_for_instance(self, instance_id: str) -> str | None:
        return next((n for n, node in self.nodes.items() if node["instance_id"] == instance_id), None)


@dataclass
class RecordingBus:
    events: list[dict[str, Any]] = field(default_factory=list)

    def publish(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def tokens(self, instance_id: str, transition: str) -> list[str]:
        return [
            e["detail"]["LifecycleActionToken"]
            for e in self.events
            if e["source"] == "aws.autoscaling"  # not EC2's state changes
            and e["detail"]["EC2InstanceId"] == instance_id
            and e["detail"]["LifecycleTransition"] == transition
        ]


@dataclass
class Emulation:
    control: AwsControl
    nodes: FakeNodes
    bus: RecordingBus
    autoscaling: Any
    ec2: Any
    sqs: Any

    def group(
        self, *hooks: HookSpec, size: int = 0, name: str = "workers", warm_pool: WarmPoolSpec | None = None
    ) -> AutoScalingGroup:
        group = AutoScalingGroup(
            autoscaling=self.autoscaling, ec2=self.ec2, control=self.control, region=REGION, name=name
        )
        group.create(GroupSpec(name=name, size=size, hooks=hooks, warm_pool=warm_pool))
        return group


@pytest.fixture
def aws() -> Iterator[Emulation]:
    install()
    with mock_aws():
        control = AwsControl(region=REGION)
        nodes, bus = FakeNodes(), RecordingBus()
        control.connect(events=bus, nodes=nodes)
        yield Emulation(
            control=control,
            nodes=nodes,
            bus=bus,
            autoscaling=_client("autoscaling"),
            ec2=_client("ec2"),
            sqs=_client("sqs"),
        )
        control.close()


def _client(service: str) -> Any:
    return boto3.client(  # type: ignore[call-overload]
        service, region_name=REGION, aws_access_key_id=OPERATOR_KEY, aws_secret_access_key="testing"
    )


@pytest.fixture
def records_table() -> Iterator[Any]:
    """A client of moto's DynamoDB in process, with an empty on-demand table RECORDS_TABLE keyed by its string
    ``id``: what the tests of the sandbox's patches of moto's DynamoDB (numbers, transactions) write to."""
    with mock_aws():
        client = boto3.client("dynamodb", region_name=REGION)
        client.create_table(
            TableName=RECORDS_TABLE,
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield client
