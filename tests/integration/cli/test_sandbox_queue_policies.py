"""The sandbox deploys the template's queue policies as CloudFormation does (each AWS::SQS::QueuePolicy set as
its queues' Policy attribute): without them, the intake and sweeper dead-letter queues of a sandbox stack were
queues EventBridge may not write to, which the doctor must call a problem in an account, and the sandbox's stack
was not the template's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodecycle_sandbox.runner.cfn_yaml import load_template
from nodecycle_sandbox.runner.intrinsics import Intrinsics
from nodecycle_sandbox.runner.resources import SandboxResources

ROOT = Path(__file__).resolve().parents[3]
REGION, ACCOUNT = "eu-west-1", "123456789012"


@pytest.fixture
def deployed() -> Iterator[tuple[SandboxResources, Any]]:
    template = load_template(ROOT / "template.yaml")
    with mock_aws():
        sqs: Any = boto3.client("sqs", region_name=REGION)
        resources = SandboxResources(
            template,
            stack_name="nodecycle",
            region=REGION,
            account=ACCOUNT,
            sqs=sqs,
            dynamodb=boto3.client("dynamodb", region_name=REGION),
        )
        resources.intrinsics = Intrinsics(
            template,
            resources=resources,
            stack_name="nodecycle",
            region=REGION,
            account=ACCOUNT,
            parameters={"ClusterName": "sandbox"},
        )
        resources.create_all()
        yield resources, sqs


def test_each_queue_policy_of_the_template_is_its_queues_policy(
    deployed: tuple[SandboxResources, Any],
) -> None:
    resources, sqs = deployed
    template = load_template(ROOT / "template.yaml")
    policies = {
        name: resource["Properties"]
        for name, resource in template["Resources"].items()
        if resource["Type"] == "AWS::SQS::QueuePolicy"
    }
    assert set(policies) == {"IntakeDeadLetterQueuePolicy", "SweeperDeadLetterQueuePolicy"}
    for properties in policies.values():
        for queue in properties["Queues"]:
            info = resources.queue(queue["Ref"])
            policy = json.loads(
                sqs.get_queue_attributes(QueueUrl=info.url, AttributeNames=["Policy"])["Attributes"]["Policy"]
            )
            (statement,) = policy["Statement"]
            assert statement["Principal"] == {"Service": "events.amazonaws.com"}
            assert statement["Resource"] == info.arn
            sources = statement["Condition"]["ArnEquals"]["aws:SourceArn"]
            sources = [sources] if isinstance(sources, str) else sources
            assert all(s.startswith(f"arn:aws:events:{REGION}:{ACCOUNT}:rule/nodecycle-") for s in sources)
    # and a queue no policy names has none
    drain = resources.queue("DrainDeadLetterQueue")
    assert "Policy" not in sqs.get_queue_attributes(QueueUrl=drain.url, AttributeNames=["Policy"]).get(
        "Attributes", {}
    )
