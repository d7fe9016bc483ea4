"""The template's parameters refuse what SQS would refuse of the queues they configure: a value the template
takes that SQS does not would fail the stack at the queue's creation (CloudFormation rolls it back), after the
operator had been told nothing of the limit."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodecycle_sandbox.aws import sqs_attributes
from nodecycle_sandbox.runner.cfn_yaml import load_template
from nodecycle_sandbox.runner.intrinsics import ParameterError, check_parameters, whole_numbers

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = load_template(ROOT / "template.yaml")


def queue_attributes_set_by_parameters() -> Iterator[tuple[str, str, str]]:
    """(queue, attribute, parameter) for each queue attribute with a range in SQS that a parameter sets."""
    for name, resource in TEMPLATE["Resources"].items():
        if resource.get("Type") != "AWS::SQS::Queue":
            continue
        properties: Mapping[str, Any] = resource.get("Properties") or {}
        for attribute in sqs_attributes.RANGES:
            value = properties.get(attribute)
            if isinstance(value, Mapping) and "Ref" in value:
                yield name, attribute, str(value["Ref"])


SET_BY_PARAMETERS = sorted(queue_attributes_set_by_parameters())


def test_some_queue_attribute_is_set_by_a_parameter() -> None:
    # (the test below would prove nothing of a template whose queues take no parameter)
    assert ("DrainQueue", "VisibilityTimeout", "WorkVisibilityTimeoutSeconds") in SET_BY_PARAMETERS


@pytest.mark.parametrize(("queue", "attribute", "parameter"), SET_BY_PARAMETERS)
def test_a_parameter_refuses_what_sqs_refuses_of_the_queue_attribute_it_sets(
    queue: str, attribute: str, parameter: str
) -> None:
    high = sqs_attributes.RANGES[attribute][1]
    taken = whole_numbers(TEMPLATE["Parameters"][parameter])
    assert taken is not None

    # Given a value just past the highest SQS takes, When the stack is deployed with it,
    # Then the template refuses the parameter (before anything is created)
    with pytest.raises(ParameterError, match=parameter):
        check_parameters(TEMPLATE, {parameter: str(high + 1)})

    # and the highest and lowest values it takes make a queue on the sandbox's SQS (which refuses as SQS does)
    sqs_attributes.install()
    with mock_aws():
        sqs: Any = boto3.client("sqs", region_name="eu-west-1")
        for value in (taken[-1], taken[0]):
            check_parameters(TEMPLATE, {parameter: str(value)})
            sqs.create_queue(QueueName=f"{queue}-{value}", Attributes={attribute: str(value)})
