"""The emulation inside moto: server mode, its own process, EKS and SQS timing."""

from __future__ import annotations

import base64
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.autoscaling.responses import AutoScalingResponse

from nodecycle_sandbox.aws import LAUNCHING, TERMINATING, AwsControl, install
from nodecycle_sandbox.aws.group import AutoScalingGroup, GroupSpec, HookSpec, wait_for
from nodecycle_sandbox.aws.process import AwsProcess
from nodecycle_sandbox.aws.server import MotoServer

from .conftest import OPERATOR_KEY, REGION, FakeNodes, RecordingBus


def _client(service: str, url: str) -> Any:
    return boto3.client(
        service,  # type: ignore[call-overload]
        endpoint_url=url,
        region_name=REGION,
        aws_access_key_id=OPERATOR_KEY,
        aws_secret_access_key="testing",
    )


@pytest.fixture
def server() -> Iterator[str]:
    moto = MotoServer()
    url = moto.start()
    yield url
    # Server mode shares moto's global backends with the other tests: leave them empty.
    urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST")).close()
    moto.stop()


def test_install_is_idempotent() -> None:
    # Given the emulation installed
    install()
    method = AutoScalingResponse.complete_lifecycle_action  # type: ignore[attr-defined]

    # When it is installed again
    install()

    # Then nothing changed
    assert AutoScalingResponse.complete_lifecycle_action is method  # type: ignore[attr-defined]


def test_lifecycle_actions_work_over_http_in_server_mode(server: str) -> None:
    # Given the emulation behind moto's HTTP server
    control = AwsControl(region=REGION)
    bus = RecordingBus()
    control.connect(events=bus, nodes=None)
    autoscaling = _client("autoscaling", server)
    group = AutoScalingGroup(
        autoscaling=autoscaling, ec2=_client("ec2", server), control=control, region=REGION, name="web"
    )
    group.create(GroupSpec(name="web", size=1, hooks=(HookSpec("drain", TERMINATING, 60, "CONTINUE"),)))
    victim = group.in_state("InService")[0]

    # When an instance is terminated and its action completed over HTTP
    group.terminate(victim, decrement=True)
    token = bus.events[0]["detail"]["LifecycleActionToken"]
    autoscaling.complete_lifecycle_action(
        AutoScalingGroupName="web",
        LifecycleHookName="drain",
        LifecycleActionToken=token,
        LifecycleActionResult="CONTINUE",
    )

    # Then the instance is gone, and a second completion is refused
    assert group.instances() == {}
    with pytest.raises(autoscaling.exceptions.ClientError, match="No active Lifecycle Action found"):
        autoscaling.complete_lifecycle_action(
            AutoScalingGroupName="web",
            LifecycleHookName="drain",
            LifecycleActionToken=token,
            LifecycleActionResult="CONTINUE",
        )
    control.close()


def test_describe_cluster_returns_the_local_api_server(server: str) -> None:
    # Given the sandbox cluster pointed at a local API server
    control = AwsControl(region=REGION)
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    control.point_cluster(name="sandbox", endpoint="https://127.0.0.1:6443", ca_pem=pem)

    # When the product describes it
    cluster = _client("eks", server).describe_cluster(name="sandbox")["cluster"]

    # Then it gets that endpoint and the CA as base64 PEM
    assert cluster["endpoint"] == "https://127.0.0.1:6443"
    assert base64.b64decode(cluster["certificateAuthority"]["data"]).decode() == pem


def test_a_delayed_message_is_received_at_its_due_time_by_a_long_poll() -> None:
    # Given a long poll waiting on an empty queue
    install()
    with mock_aws():
        sqs = boto3.client("sqs", region_name=REGION)
        url = sqs.create_queue(QueueName="work")["QueueUrl"]
        sending = time.monotonic()
        sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=1)
        sent = time.monotonic()

        # When the message's delay runs out
        messages = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5)["Messages"]
        received = time.monotonic()

        # Then the poll returns it then: not before its delay from the send, and not a second after its delay
        # from the send's answer (the time the send itself took is left out: under load it took more than the
        # 0.15 s this allowed, measured from before the send)
        assert messages[0]["Body"] == "later"
        assert received - sending >= 1.0
        assert received - sent < 1.9


def test_the_aws_process_relays_events_and_nodes_and_answers_controls() -> None:
    # Given the emulation in its own process
    bus, nodes = RecordingBus(), FakeNodes()
    process = AwsProcess(region=REGION, events=bus, nodes=nodes)
    url = process.start()
    try:
        assert process.control is not None
        process.control.plan_nodes(ready_after=1.5)
        group = AutoScalingGroup(
            autoscaling=_client("autoscaling", url),
            ec2=_client("ec2", url),
            control=process.control,
            region=REGION,
            name="web",
        )

        # When an instance launches through a launch hook
        group.create(GroupSpec(name="web", size=1, hooks=(HookSpec("ready", LAUNCHING, 60),)))

        # Then the event and the node come out of the process, and the records come back from it
        wait_for(lambda: bus.events and nodes.nodes, timeout=5)
        (instance,) = group.in_state("Pending:Wait")
        assert bus.events[0]["detail"]["EC2InstanceId"] == instance
        assert nodes.node_for_instance(instance) is not None
        assert [a.instance_id for a in group.actions()] == [instance]
    finally:
        process.stop()
