"""Intrinsic functions resolve as CloudFormation resolves them, and what CloudFormation refuses the sandbox refuses:
a condition that refers to a resource ("Template format error: Unresolved dependencies [X]. Cannot reference
resources in the Conditions block of the template"), an Fn::Sub whose variable is a list ("Template error: variable
X in Fn::Sub expression does not resolve to a string"), and an Fn::Join of something other than strings ("every
Fn::Join object requires two parameters, (1) a string delimiter and (2) a list of strings to be joined")."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from nodecycle_sandbox.iam.template import StaticResources
from nodecycle_sandbox.runner.cfn_yaml import _CfnLoader
from nodecycle_sandbox.runner.intrinsics import Intrinsics

TEMPLATE = """
Parameters:
  Subnets: {Type: CommaDelimitedList, Default: "subnet-1,subnet-2"}
  Name: {Type: String, Default: nodes}
Conditions:
  NamedQueue: !Equals [!Ref Work, ""]
  NamedArn: !Equals [!GetAtt Work.Arn, ""]
  Named: !Equals [!Ref Name, nodes]
Resources:
  Work:
    Type: AWS::SQS::Queue
"""


def intrinsics() -> Intrinsics:
    template: dict[str, Any] = yaml.load(TEMPLATE, Loader=_CfnLoader)
    resources = StaticResources(template, stack_name="s", region="eu-west-1", account="123456789012")
    resources.intrinsics = Intrinsics(
        template, resources=resources, stack_name="s", region="eu-west-1", account="123456789012"
    )
    return resources.intrinsics


@pytest.mark.parametrize("condition", ["NamedQueue", "NamedArn"])
def test_a_condition_that_refers_to_a_resource_is_refused(condition: str) -> None:
    with pytest.raises(ValueError, match=r"Cannot reference resources in the Conditions block"):
        intrinsics().condition(condition)
    assert intrinsics().condition("Named")


def test_an_fn_sub_of_a_list_is_refused() -> None:
    with pytest.raises(
        ValueError, match=r"variable Subnets in Fn::Sub expression does not resolve to a string"
    ):
        intrinsics().resolve({"Fn::Sub": "arn:aws:ec2:*:*:subnet/${Subnets}"})
    assert intrinsics().resolve({"Fn::Sub": "${Name}-drain"}) == "nodes-drain"


def test_an_fn_join_of_a_list_within_the_list_is_refused() -> None:
    with pytest.raises(ValueError, match=r"Fn::Join"):
        intrinsics().resolve({"Fn::Join": [",", [{"Ref": "Subnets"}]]})
    assert intrinsics().resolve({"Fn::Join": [",", {"Ref": "Subnets"}]}) == "subnet-1,subnet-2"
