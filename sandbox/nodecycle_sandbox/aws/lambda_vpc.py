"""Lambda refusing a function's VpcConfig whose subnets and security groups are not given together.

CreateFunction and UpdateFunctionConfiguration refuse a VpcConfig with subnets and no security group, or security
groups and no subnet: InvalidParameterValueException "SubnetIds and SecurityIds must coexist or be both empty
list." (the message Lambda's SDK users meet, e.g. aws/aws-sdk-js#1293); and an id that is not one, an empty
string included, fails the API's own constraint (botocore's lambda model: VpcConfig.SubnetIds members match
``subnet-[0-9a-z]*``, SecurityGroupIds members ``sg-[0-9a-zA-Z]*``), a ValidationException. moto stored any
VpcConfig, so that a stack whose parameters gave one list without the other deployed in the sandbox and not on
AWS (the template's VpcTogether rule now refuses it first).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from moto.awslambda.exceptions import InvalidParameterValueException, ValidationException
from moto.awslambda.models import LambdaBackend

COEXIST = "SubnetIds and SecurityIds must coexist or be both empty list."
_PATTERNS = {"SubnetIds": re.compile(r"subnet-[0-9a-z]*"), "SecurityGroupIds": re.compile(r"sg-[0-9a-zA-Z]*")}
# (the same model: at most 16 subnets and 5 security groups; a client checks only the least, none)
_MOST = {"SubnetIds": 16, "SecurityGroupIds": 5}
_MARKER = "_nodecycle_sandbox_vpc"


def check_vpc_config(config: Mapping[str, Any] | None) -> None:
    """Refuse ``config`` as Lambda does; None or an absent list is an empty one."""
    if not config:
        return
    lists = {key: list(config.get(key) or []) for key in _PATTERNS}
    for key, ids in lists.items():
        if len(ids) > _MOST[key]:
            raise ValidationException(
                str(ids),
                f"vpcConfig.{key[0].lower()}{key[1:]}",
                f"Member must have length less than or equal to {_MOST[key]}",
            )
        for value in ids:
            if not isinstance(value, str) or _PATTERNS[key].fullmatch(value) is None:
                raise ValidationException(
                    str(ids),
                    f"vpcConfig.{key[0].lower()}{key[1:]}",
                    f"Member must satisfy regular expression pattern: {_PATTERNS[key].pattern}",
                )
    if bool(lists["SubnetIds"]) != bool(lists["SecurityGroupIds"]):
        raise InvalidParameterValueException(COEXIST)


def install() -> None:
    """Idempotent: a second call changes nothing."""
    if getattr(LambdaBackend, _MARKER, False):
        return
    create, update = LambdaBackend.create_function, LambdaBackend.update_function_configuration

    def create_function(self: LambdaBackend, spec: dict[str, Any]) -> Any:
        check_vpc_config(spec.get("VpcConfig"))
        return create(self, spec)

    def update_function_configuration(
        self: LambdaBackend, function_name: str, qualifier: str, body: dict[str, Any]
    ) -> Any:
        check_vpc_config(body.get("VpcConfig"))
        return update(self, function_name, qualifier, body)

    LambdaBackend.create_function = create_function  # type: ignore[method-assign]
    LambdaBackend.update_function_configuration = update_function_configuration  # type: ignore[method-assign]
    setattr(LambdaBackend, _MARKER, True)
