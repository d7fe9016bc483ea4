"""What IAM authorizes for a call moto is about to serve: the action, each resource it touches (ARNs from
moto's own state) and the condition keys of the request (region, the resources' tags, the tags asked
for).

Only the operations whose resources the template scopes need a resolver here; any other operation is
authorized on ``"*"``, which is what AWS does for actions without resource-level permissions (Describe*).
A group that does not exist is judged by the ARN its name would have (``resource_found=False``) and without tags:
a role granted the action on that name hears what Auto Scaling answers (a ``ValidationError``), one granted it on
other names only, or on groups of a tag, is refused (the sandbox once let any role granted the action somewhere
hear the ``ValidationError``, which the adapter takes for an action settled).

An Elastic IP EC2 no longer has (released, or an association ended) is judged as AWS judges it: IAM decides
before EC2 looks the address up, with no ``aws:ResourceTag/...`` key in the request (an absent key fails every
condition on it but ``...IfExists`` and ``Null``), so a role granted the action on tagged addresses only hears
``UnauthorizedOperation``, not ``InvalidAllocationID.NotFound`` / ``InvalidAssociationID.NotFound``; only a role
granted it unconditionally hears those. (IAM user guide, condition operators: "If the key that you specify in a
policy condition is not present in the request context, the values do not match and the condition is false";
EC2 answers UnauthorizedOperation for a tag-scoped TerminateInstances of an instance that no longer exists.)
The instance an AssociateAddress names likewise: one EC2 no longer has (or never had) is judged with no tags.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from nodecycle_sandbox.iam.evaluate import Request, context_of

# Batch operations are authorized as the single-message action.
_SQS_ACTIONS = {
    "SendMessageBatch": "SendMessage",
    "DeleteMessageBatch": "DeleteMessage",
    "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
}
# moto's name for a service (its backend's module) where it is not the service's prefix in IAM actions: a
# policy granting lambda:GetPolicy was judged against "awslambda:GetPolicy" and refused
_IAM_PREFIXES = {
    "awslambda": "lambda",
    "elb": "elasticloadbalancing",
    "elbv2": "elasticloadbalancing",
    "resourcegroupstaggingapi": "tag",
    "service-quotas": "servicequotas",
}
# Actions AWS never denies.
UNAUTHORIZED_ACTIONS = frozenset({"sts:GetCallerIdentity"})


def requests_for(response: Any) -> list[Request]:
    """The IAM requests of the call ``response`` (a moto ``BaseResponse``) is serving."""
    service = str(response.service_name)
    operation = str(response._get_action())
    region = str(response.region)
    account = str(response.current_account)
    base = {"aws:RequestedRegion": region}
    resolver = _RESOLVERS.get(service)
    if resolver is None:
        return [Request(f"{_IAM_PREFIXES.get(service, service)}:{operation}", "*", context_of(base))]
    return resolver(response, operation, region, account, base)


def _tag_context(prefixes: Iterable[str], tags: Mapping[str, str]) -> dict[str, str]:
    return {f"{prefix}/{key}": value for prefix in prefixes for key, value in tags.items()}


def _request_tags(tags: Mapping[str, str]) -> dict[str, str | list[str]]:
    context: dict[str, str | list[str]] = {f"aws:RequestTag/{k}": v for k, v in tags.items()}
    if tags:
        context["aws:TagKeys"] = list(tags)
    return context


# -- EC2 -------------------------------------------------------------------------------------------------


def _ec2(response: Any, operation: str, region: str, account: str, base: dict[str, Any]) -> list[Request]:
    backend = response.ec2_backend
    prefix = f"arn:aws:ec2:{region}:{account}"
    action = f"ec2:{operation}"

    def tagged(kind: str, resource: Any) -> Request:
        tags = _tags_of(backend, resource.id)
        context = {**base, **_tag_context(("aws:ResourceTag", "ec2:ResourceTag"), tags)}
        return Request(action, f"{prefix}:{kind}/{resource.id}", context_of(context))

    if operation == "AllocateAddress":
        tags = (response._parse_tag_specification() or {}).get("elastic-ip", {})
        requests = [Request(action, f"{prefix}:elastic-ip/*", context_of({**base, **_request_tags(tags)}))]
        if tags:  # tagging on create needs ec2:CreateTags for the new resource too
            context = {**base, **_request_tags(tags), "ec2:CreateAction": operation}
            requests.append(Request("ec2:CreateTags", f"{prefix}:elastic-ip/*", context_of(context)))
        return requests
    if operation in ("AssociateAddress", "ReleaseAddress"):
        allocation, public_ip = response._get_param("AllocationId"), response._get_param("PublicIp")
        address = _address(backend, allocation_id=allocation, public_ip=public_ip)
        named = allocation or public_ip
        if address is None:  # judged with no tags: see the module's docstring
            requests = [Request(action, f"{prefix}:elastic-ip/{named or '*'}", context_of(base))]
        else:
            requests = [tagged("elastic-ip", address)]
        if operation == "AssociateAddress":
            instance_id = response._get_param("InstanceId")
            instance = _lookup(backend.get_instance, instance_id)
            interface = _lookup(backend.get_network_interface, response._get_param("NetworkInterfaceId"))
            if instance is not None:
                requests.append(tagged("instance", instance))
            elif instance_id:  # gone (aged out) or never was: judged with no tags, as a gone address is
                requests.append(Request(action, f"{prefix}:instance/{instance_id}", context_of(base)))
            if interface is not None:
                requests.append(tagged("network-interface", interface))
        return requests
    if operation == "DisassociateAddress":
        address = _address(
            backend,
            association_id=response._get_param("AssociationId"),
            public_ip=response._get_param("PublicIp"),
        )
        # an association gone, and with it what names the address: judged with no tags (see the docstring)
        if address is None:
            return [Request(action, f"{prefix}:elastic-ip/*", context_of(base))]
        requests = [tagged("elastic-ip", address)]
        if address.eni is not None:
            requests.append(tagged("network-interface", address.eni))
        return requests
    if operation == "CreateTags":
        # moto's parser names the members as the service model does (Resources, Tags), not as the wire
        # does (ResourceId.N, Tag.N). Each resource is judged on the tags asked for and on its own tags.
        tags = {t["Key"]: t.get("Value", "") for t in response._get_param("Tags", [])}
        return [
            Request(
                action,
                f"{prefix}:{_ec2_kind(rid)}/{rid}",
                context_of(
                    {
                        **base,
                        **_tag_context(("aws:ResourceTag", "ec2:ResourceTag"), _tags_of(backend, rid)),
                        **_request_tags(tags),
                    }
                ),
            )
            for rid in response._get_param("Resources", [])
        ]
    return [Request(action, "*", context_of(base))]


def _missing(action: str, arn: str, base: dict[str, Any]) -> Request:
    return Request(action, arn, context_of(base), resource_found=False)


def _tags_of(backend: Any, resource_id: str) -> dict[str, str]:
    return {str(k): str(v) for k, v in backend.tags.get(resource_id, {}).items()}


def _address(
    backend: Any,
    *,
    allocation_id: str | None = None,
    association_id: str | None = None,
    public_ip: str | None = None,
) -> Any:
    """The address a call names, by whichever id it gives: EC2 still takes the (deprecated) PublicIp instead
    of the AllocationId or AssociationId, and IAM authorizes on the address all the same."""
    for address in backend.addresses:
        if (
            (allocation_id and address.allocation_id == allocation_id)
            or (association_id and address.association_id == association_id)
            or (not allocation_id and not association_id and public_ip and address.public_ip == public_ip)
        ):
            return address
    return None


def _lookup(getter: Callable[[str], Any], identifier: str | None) -> Any:
    if not identifier:
        return None
    try:
        return getter(identifier)
    except Exception:  # moto raises a service-specific NotFound; the call itself will answer it
        return None


_EC2_KINDS = {"eipalloc": "elastic-ip", "i": "instance", "eni": "network-interface", "subnet": "subnet"}


def _ec2_kind(resource_id: str) -> str:
    return _EC2_KINDS.get(resource_id.split("-", 1)[0], "resource")


# -- Auto Scaling ----------------------------------------------------------------------------------------


def _autoscaling(
    response: Any, operation: str, region: str, account: str, base: dict[str, Any]
) -> list[Request]:
    action = f"autoscaling:{operation}"
    name = response._get_param("AutoScalingGroupName")
    if operation.startswith("Describe") or not name:
        return [Request(action, "*", context_of(base))]
    group = response.autoscaling_backend.autoscaling_groups.get(name)
    if group is None:
        arn = f"arn:aws:autoscaling:{region}:{account}:autoScalingGroup:*:autoScalingGroupName/{name}"
        return [_missing(action, arn, base)]
    tags = {t["Key"]: t.get("Value", "") for t in group.tags}
    context = {**base, **_tag_context(("aws:ResourceTag", "autoscaling:ResourceTag"), tags)}
    return [Request(action, str(group.arn), context_of(context))]


# -- SQS, DynamoDB, EKS ----------------------------------------------------------------------------------


def _sqs(response: Any, operation: str, region: str, account: str, base: dict[str, Any]) -> list[Request]:
    action = f"sqs:{_SQS_ACTIONS.get(operation, operation)}"
    url = response._get_param("QueueUrl")
    if url:
        name = str(url).rstrip("/").rsplit("/", 1)[-1]
        owner = str(url).rstrip("/").rsplit("/", 2)[-2]
    else:
        name = response._get_param("QueueName")
        owner = response._get_param("QueueOwnerAWSAccountId") or account
    resource = f"arn:aws:sqs:{region}:{owner}:{name}" if name else "*"
    return [Request(action, resource, context_of(base))]


# What each action of a transaction is authorized as: the operation it stands for, on its own table.
_TRANSACTION_ACTIONS = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
    "Get": "GetItem",
}


def _dynamodb(
    response: Any, operation: str, region: str, account: str, base: dict[str, Any]
) -> list[Request]:
    if operation in ("TransactWriteItems", "TransactGetItems"):
        return [
            Request(
                f"dynamodb:{_TRANSACTION_ACTIONS[kind]}",
                f"arn:aws:dynamodb:{region}:{account}:table/{action['TableName']}",
                context_of({**base, "dynamodb:EnclosingOperation": operation}),
            )
            for item in response._get_param("TransactItems") or []
            for kind, action in item.items()
        ]
    if operation in ("BatchGetItem", "BatchWriteItem"):
        # (authorized on each table its RequestItems name, as IAM's service authorization reference lists them:
        # resource type table; the request names no TableName of its own)
        return [
            Request(
                f"dynamodb:{operation}", f"arn:aws:dynamodb:{region}:{account}:table/{name}", context_of(base)
            )
            for name in response._get_param("RequestItems") or {}
        ]
    table = response._get_param("TableName")
    if not table:
        return [Request(f"dynamodb:{operation}", "*", context_of(base))]
    resource = f"arn:aws:dynamodb:{region}:{account}:table/{table}"
    index = response._get_param("IndexName")
    if index:
        resource += f"/index/{index}"
    return [Request(f"dynamodb:{operation}", resource, context_of(base))]


def _eks(response: Any, operation: str, region: str, account: str, base: dict[str, Any]) -> list[Request]:
    name = response._get_param("name")
    resource = f"arn:aws:eks:{region}:{account}:cluster/{name}" if name else "*"
    return [Request(f"eks:{operation}", resource, context_of(base))]


_RESOLVERS: dict[str, Callable[[Any, str, str, str, dict[str, Any]], list[Request]]] = {
    "ec2": _ec2,
    "autoscaling": _autoscaling,
    "sqs": _sqs,
    "dynamodb": _dynamodb,
    "eks": _eks,
}
