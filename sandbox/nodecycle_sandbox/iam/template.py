"""The roles a deployment of the template would create, with their policies resolved as CloudFormation
would resolve them: each function's role (its ``Role: !GetAtt <Role>.Arn``), the inline ``Policies`` of
every ``AWS::IAM::Role``, and the ``AWS::IAM::RolePolicy`` / ``AWS::IAM::Policy`` resources attached to
it. Plain data (see ``identities.role_of``), to cross into the AWS process.

A function without an explicit role would get SAM's generated one (managed policies the sandbox does not
hold); a managed policy ARN cannot be read either: both are refused rather than guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodecycle_sandbox.iam.policy import PolicyError
from nodecycle_sandbox.runner.intrinsics import Intrinsics
from nodecycle_sandbox.runner.resources import SandboxResources

_ATTACHED = ("AWS::IAM::RolePolicy", "AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")


def template_roles(
    template: Mapping[str, Any], intrinsics: Intrinsics, resources: SandboxResources
) -> dict[str, dict[str, Any]]:
    """Every role of the template whose condition holds, by logical id: ``{"arn", "trust", "policies"}``."""
    declared: Mapping[str, Any] = template["Resources"]
    roles: dict[str, dict[str, Any]] = {}
    for logical_id, resource in declared.items():
        if resource["Type"] != "AWS::IAM::Role" or not resources.exists(logical_id):
            continue
        properties = resource.get("Properties") or {}
        if properties.get("ManagedPolicyArns"):
            raise PolicyError(f"{logical_id}: the sandbox cannot read managed policies; write them inline")
        policies = [
            {"source": f"{logical_id}/{p['PolicyName']}", "document": intrinsics.resolve(p["PolicyDocument"])}
            for p in properties.get("Policies") or []
        ]
        roles[logical_id] = {
            "arn": resources.role_arn(logical_id),
            "trust": intrinsics.resolve(properties.get("AssumeRolePolicyDocument")),
            "policies": policies,
        }
    for logical_id, resource in declared.items():
        if resource["Type"] not in _ATTACHED or not resources.exists(logical_id):
            continue
        properties = resource.get("Properties") or {}
        targets = [properties["RoleName"]] if "RoleName" in properties else properties.get("Roles") or []
        for target in targets:
            role = target.get("Ref") if isinstance(target, Mapping) else None
            if role not in roles:
                raise PolicyError(f"{logical_id}: attach policies to a role of the template with !Ref")
            name = properties.get("PolicyName") or properties.get("ManagedPolicyName") or logical_id
            roles[role]["policies"].append(
                {"source": f"{role}/{name}", "document": intrinsics.resolve(properties["PolicyDocument"])}
            )
    return roles


def function_role(template: Mapping[str, Any], function: str) -> str:
    """The logical id of the role a function runs as (``Role: !GetAtt <Role>.Arn``)."""
    properties = template["Resources"][function].get("Properties") or {}
    role = properties.get("Role")
    if isinstance(role, Mapping) and "Fn::GetAtt" in role:
        logical_id, attribute = role["Fn::GetAtt"]
        if attribute == "Arn":
            return str(logical_id)
    raise PolicyError(
        f"{function}: the sandbox evaluates explicit roles only (Role: !GetAtt <Role>.Arn), not SAM's "
        "generated ones"
    )


def access_entries(
    template: Mapping[str, Any], intrinsics: Intrinsics, resources: SandboxResources
) -> list[dict[str, Any]]:
    """The template's EKS access entries whose condition holds: ``{"principal_arn", "groups", "username"}``."""
    entries = []
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] != "AWS::EKS::AccessEntry" or not resources.exists(logical_id):
            continue
        properties = intrinsics.resolve(resource.get("Properties") or {})
        entries.append(
            {
                "principal_arn": properties["PrincipalArn"],
                "groups": tuple(properties.get("KubernetesGroups") or ()),
                "username": properties.get("Username"),
            }
        )
    return entries
