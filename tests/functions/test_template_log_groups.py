"""Each function logs, from its first invocation, into the log group the stack creates for it (with its retention),
and its role may write there by then.

CloudFormation creates a resource after those it refers to (Ref, GetAtt, Sub) or DependsOn. A log group named after
its function (/aws/lambda/${Function}) is created after the function: the function's first invocations (an SQS
mapping or a rule created beside the group) find no group, and either Lambda creates one without retention (a role
with logs:CreateLogGroup: the stack's group then fails "already exists" and the stack rolls back) or their logs are
lost (these roles cannot create one). On deletion the group goes first, while the function may still run."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from nodecycle_sandbox.runner.cfn_yaml import load_template

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = load_template(ROOT / "template.yaml")
RESOURCES: Mapping[str, Any] = TEMPLATE["Resources"]
FUNCTIONS = sorted(name for name, r in RESOURCES.items() if r["Type"] == "AWS::Serverless::Function")
_SUB_NAME = re.compile(r"\$\{([A-Za-z0-9]+)[.}]")


def referred(value: Any) -> set[str]:
    """The resources a value refers to: Ref, Fn::GetAtt and the ${...} of Fn::Sub."""
    found: set[str] = set()
    if isinstance(value, list):
        for item in value:
            found |= referred(item)
    elif isinstance(value, dict):
        for key, argument in value.items():
            if key == "Ref":
                found.add(str(argument))
            elif key == "Fn::GetAtt":
                found.add(str(argument[0] if isinstance(argument, list) else argument.split(".")[0]))
            elif key == "Fn::Sub":
                text = argument[0] if isinstance(argument, list) else argument
                found |= set(_SUB_NAME.findall(text))
                found |= referred(argument[1:] if isinstance(argument, list) else [])
            else:
                found |= referred(argument)
    return found & set(RESOURCES)


def created_before(logical_id: str) -> set[str]:
    """Every resource CloudFormation creates before this one (what it refers to or depends on, transitively)."""
    seen: set[str] = set()
    todo = [logical_id]
    while todo:
        resource = RESOURCES[todo.pop()]
        depends = resource.get("DependsOn") or []
        for name in referred(resource.get("Properties")) | set(
            [depends] if isinstance(depends, str) else depends
        ):
            if name not in seen:
                seen.add(name)
                todo.append(name)
    return seen


def log_group_of(function: str) -> str:
    config = RESOURCES[function]["Properties"].get("LoggingConfig") or {}
    group = config.get("LogGroup")
    assert isinstance(group, dict), f"{function} names no log group of the stack's"
    assert set(group) == {"Ref"}
    assert RESOURCES[group["Ref"]]["Type"] == "AWS::Logs::LogGroup"
    return str(group["Ref"])


def test_the_functions_were_found() -> None:
    assert FUNCTIONS == ["DrainFunction", "EipFunction", "IntakeFunction", "SweeperFunction", "WakeFunction"]


@pytest.mark.parametrize("function", FUNCTIONS)
def test_a_function_logs_into_a_group_of_the_stacks_created_before_it(function: str) -> None:
    # Given the log group the function writes to (LoggingConfig)
    group = log_group_of(function)
    # Then the stack creates it, with its retention, before the function, and not after it
    assert "RetentionInDays" in RESOURCES[group]["Properties"]
    assert group in created_before(function)
    assert function not in created_before(group)


@pytest.mark.parametrize("function", FUNCTIONS)
def test_a_functions_role_may_write_its_logs_before_the_function_is_created(function: str) -> None:
    # Given the policy that lets the function's role write into its log group
    group = log_group_of(function)
    role = RESOURCES[function]["Properties"]["Role"]["Fn::GetAtt"][0]
    granting = [
        name
        for name, r in RESOURCES.items()
        if r["Type"] == "AWS::IAM::RolePolicy"
        and r["Properties"]["RoleName"] == {"Ref": role}
        and group in referred(r["Properties"]["PolicyDocument"])
    ]
    assert granting, f"no policy of {role} names {group}"
    # Then it is in place before the function's first invocation
    assert set(granting) <= created_before(function)


def test_each_function_has_a_log_group_of_its_own() -> None:
    groups = [log_group_of(function) for function in FUNCTIONS]
    assert len(set(groups)) == len(groups)
