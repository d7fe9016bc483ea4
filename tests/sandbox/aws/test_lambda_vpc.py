"""Lambda refuses a VpcConfig whose subnets and security groups are not given together ("SubnetIds and SecurityIds
must coexist or be both empty list.", InvalidParameterValueException), an id that is not one (botocore's lambda
model: subnet-[0-9a-z]*, sg-[0-9a-zA-Z]*), and more than 16 subnets or 5 security groups, at CreateFunction and
UpdateFunctionConfiguration. moto stored any."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from nodecycle_sandbox.aws.install import install
from tests.sandbox.aws.conftest import worker_function


@pytest.fixture
def awslambda() -> Iterator[Any]:
    install()
    with mock_aws():
        yield worker_function(timeout=60)


@pytest.mark.parametrize(
    ("config", "code"),
    [
        ({"SubnetIds": ["subnet-0abc"], "SecurityGroupIds": []}, "InvalidParameterValueException"),
        ({"SubnetIds": ["subnet-0abc"]}, "InvalidParameterValueException"),
        ({"SubnetIds": [], "SecurityGroupIds": ["sg-0a1b"]}, "InvalidParameterValueException"),
        ({"SubnetIds": ["subnet-0abc", ""], "SecurityGroupIds": ["sg-0a1b"]}, "ValidationException"),
        ({"SubnetIds": ["subnet-0abc"], "SecurityGroupIds": [" sg-0a1b"]}, "ValidationException"),
        (
            {"SubnetIds": [f"subnet-{n:x}" for n in range(17)], "SecurityGroupIds": ["sg-0a1b"]},
            "ValidationException",
        ),
        (
            {"SubnetIds": ["subnet-0abc"], "SecurityGroupIds": [f"sg-{n}" for n in range(6)]},
            "ValidationException",
        ),
    ],
)
def test_a_vpc_config_lambda_refuses_is_refused(awslambda: Any, config: dict[str, Any], code: str) -> None:
    with pytest.raises(ClientError) as refused:
        awslambda.update_function_configuration(FunctionName="worker", VpcConfig=config)

    assert refused.value.response["Error"]["Code"] == code
    if code == "InvalidParameterValueException":
        assert (
            refused.value.response["Error"]["Message"]
            == "SubnetIds and SecurityIds must coexist or be both empty list."
        )
    assert (
        not awslambda.get_function_configuration(FunctionName="worker").get("VpcConfig", {}).get("SubnetIds")
    )
    # (both, or neither, are taken)
    awslambda.update_function_configuration(
        FunctionName="worker", VpcConfig={"SubnetIds": ["subnet-0abc"], "SecurityGroupIds": ["sg-0a1b"]}
    )
    awslambda.update_function_configuration(
        FunctionName="worker", VpcConfig={"SubnetIds": [], "SecurityGroupIds": []}
    )
