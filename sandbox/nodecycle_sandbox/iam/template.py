"""The roles a deployment of the template would create, with their policies resolved as CloudFormation
would resolve them: each function's role (its ``Role: !GetAtt <Role>.Arn``), the inline ``Policies`` of
every ``AWS::IAM::Role``, and the ``AWS::IAM::RolePolicy`` / ``AWS::IAM::Policy`` resources attached to
it. Plain data (see ``identities.role_of``), to cross into the AWS process.

A function without an explicit role would get SAM's generated one (managed policies the sandbox does not
hold); a managed policy ARN cannot be read either: both are refused rather than guessed.

A role's inline policies (its ``Policies``, and the ``AWS::IAM::RolePolicy`` and ``AWS::IAM::Policy`` attached
to it) total at most 10,240 characters, white space not counted, and a managed policy at most 6,144 ("IAM and
AWS STS quotas", IAM user guide): IAM refuses the policy that passes it ("Maximum policy size of 10240 bytes
exceeded for role ...", LimitExceeded) and CloudFormation rolls the stack back. So does the sandbox, which
created any role.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from nodecycle_sandbox.iam.policy import PolicyError
from nodecycle_sandbox.runner.intrinsics import Intrinsics


class Deployed(Protocol):
    """What resolving the roles needs of a deployment (``SandboxResources``, or ``StaticResources``)."""

    def exists(self, logical_id: str) -> bool: ...

    def role_arn(self, logical_id: str) -> str: ...


_ATTACHED = ("AWS::IAM::RolePolicy", "AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")
ROLE_POLICY_SIZE_QUOTA = 10_240  # characters of a role's inline policies together
MANAGED_POLICY_SIZE_QUOTA = 6_144  # characters of one managed policy


def template_roles(
    template: Mapping[str, Any], intrinsics: Intrinsics, resources: Deployed
) -> dict[str, dict[str, Any]]:
    """Every role of the template whose condition holds, by logical id: ``{"arn", "trust", "policies"}``."""
    declared: Mapping[str, Any] = template["Resources"]
    roles: dict[str, dict[str, Any]] = {}
    inline: dict[str, list[Any]] = {}  # each role's inline policy documents, held to IAM's quota together
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
        inline[logical_id] = [policy["document"] for policy in policies]
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
            document = intrinsics.resolve(properties["PolicyDocument"])
            if resource["Type"] == "AWS::IAM::ManagedPolicy":
                _within_quota([document], MANAGED_POLICY_SIZE_QUOTA, f"policy {name}")
            else:
                inline[role].append(document)
            roles[role]["policies"].append({"source": f"{role}/{name}", "document": document})
    for logical_id, documents in inline.items():
        _within_quota(
            documents, ROLE_POLICY_SIZE_QUOTA, f"role {roles[logical_id]['arn'].rsplit('/', 1)[-1]}"
        )
    return roles


class PolicyLimitExceeded(PolicyError):
    """Policies larger than IAM takes: IAM's LimitExceeded, which fails the stack's deployment."""


def policy_size(documents: Iterable[Any]) -> int:
    """The size IAM holds policies to: their characters, white space not counted."""
    return sum(len(json.dumps(document, separators=(",", ":"), ensure_ascii=False)) for document in documents)


def _within_quota(documents: list[Any], quota: int, what: str) -> None:
    size = policy_size(documents)
    if size > quota:
        raise PolicyLimitExceeded(
            f"Maximum policy size of {quota} bytes exceeded for {what} ({size} characters without white "
            "space): IAM refuses it (LimitExceeded), and CloudFormation the stack"
        )


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
    template: Mapping[str, Any], intrinsics: Intrinsics, resources: Deployed
) -> list[dict[str, Any]]:
    """The template's EKS access entries whose condition holds: ``{"principal_arn", "groups", "username"}``.

    What an entry would grant outside the cluster's RBAC is refused rather than ignored, as a managed policy is
    (``template_roles``): its ``AccessPolicies`` (EKS's own authorizer, before RBAC: AmazonEKSClusterAdminPolicy
    is cluster-admin whatever deploy/rbac.yaml binds), and a ``Type`` other than ``STANDARD`` (EKS maps an
    ``EC2_LINUX``, ``EC2_WINDOWS`` or ``FARGATE_LINUX`` entry to ``system:nodes``, the node authorizer's, whatever
    groups it names). The sandbox evaluates neither, nor does the reviewed summary show them."""
    entries = []
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] != "AWS::EKS::AccessEntry" or not resources.exists(logical_id):
            continue
        properties = intrinsics.resolve(resource.get("Properties") or {})
        if properties.get("AccessPolicies"):
            raise PolicyError(
                f"{logical_id}: the sandbox cannot evaluate EKS access policies; grant in the cluster's RBAC "
                "(deploy/rbac.yaml) to the entry's groups"
            )
        kind = properties.get("Type", "STANDARD")
        if kind != "STANDARD":
            raise PolicyError(
                f"{logical_id}: an access entry of type {kind} is a node's (system:nodes), which the sandbox does "
                "not authorize; nodecycle's roles take STANDARD entries"
            )
        entries.append(
            {
                "principal_arn": properties["PrincipalArn"],
                "groups": tuple(properties.get("KubernetesGroups") or ()),
                "username": properties.get("Username"),
            }
        )
    return entries


class StaticResources:
    """The physical names and ARNs a sandbox deployment gives the template's resources (``<stack>-<id>``),
    without deploying anything: to read the policies offline (reports, the permission summary)."""

    def __init__(self, template: Mapping[str, Any], *, stack_name: str, region: str, account: str) -> None:
        self._resources: Mapping[str, Any] = template["Resources"]
        self._stack, self._region, self._account = stack_name, region, account
        self.intrinsics: Intrinsics | None = None

    def exists(self, logical_id: str) -> bool:
        condition = self._resources[logical_id].get("Condition")
        return condition is None or self._resolver().condition(condition)

    def role_arn(self, logical_id: str) -> str:
        return f"arn:aws:iam::{self._account}:role/{self._stack}-{logical_id}"

    def ref(self, logical_id: str) -> str:
        kind = self._resources[logical_id]["Type"]
        name = f"{self._stack}-{logical_id}"
        if kind == "AWS::SQS::Queue":
            return f"https://sqs.{self._region}.amazonaws.com/{self._account}/{name}"
        return name

    def get_att(self, logical_id: str, attribute: str) -> str:
        kind = self._resources[logical_id]["Type"]
        name = f"{self._stack}-{logical_id}"
        arns = {
            "AWS::SQS::Queue": f"arn:aws:sqs:{self._region}:{self._account}:{name}",
            "AWS::DynamoDB::Table": f"arn:aws:dynamodb:{self._region}:{self._account}:table/{name}",
            "AWS::IAM::Role": self.role_arn(logical_id),
            "AWS::Serverless::Function": f"arn:aws:lambda:{self._region}:{self._account}:function:{name}",
        }
        if kind == "AWS::Logs::LogGroup":
            group = self._resolver().resolve(self._resources[logical_id]["Properties"].get("LogGroupName"))
            return f"arn:aws:logs:{self._region}:{self._account}:log-group:{group or name}:*"
        if attribute == "QueueName":
            return name
        if attribute != "Arn" or kind not in arns:
            service = kind.split("::")[1].lower()
            return f"arn:aws:{service}:{self._region}:{self._account}:{name}"
        return arns[kind]

    def _resolver(self) -> Intrinsics:
        if self.intrinsics is None:
            raise RuntimeError("StaticResources.intrinsics must be set before resolving")
        return self.intrinsics


def offline_roles(
    template: Mapping[str, Any],
    parameters: Mapping[str, str],
    *,
    stack_name: str = "nodecycle",
    region: str = "eu-west-1",
    account: str = "123456789012",
) -> dict[str, dict[str, Any]]:
    """The template's roles resolved for ``parameters`` without deploying (see ``StaticResources``)."""
    resources = StaticResources(template, stack_name=stack_name, region=region, account=account)
    resources.intrinsics = Intrinsics(
        template,
        resources=resources,
        stack_name=stack_name,
        region=region,
        account=account,
        parameters=parameters,
    )
    return template_roles(template, resources.intrinsics, resources)
