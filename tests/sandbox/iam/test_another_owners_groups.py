"""A group this stack names (ManagedGroups) that carries another owner's tag is that owner's: the functions leave
its actions alone (``ManagedGroups``: "never when that tag names another owner"), and so must the roles
(invariants 3 and 12). The by-name grants on lifecycle actions, and on the instances an address is associated
with, held for any group of the name whatever its ``nodecycle:owner`` tag said: a bug or a message in this stack
could complete (CONTINUE: terminate undrained) or heartbeat the actions of the stack that owns the group by tag,
or move an address onto its instances. IAM evaluates ``...IfExists`` on the group's (the instance's) own tag:
absent, the name alone decides, as before; present, it must name this owner. moto in this process, the real
template deployed by the runner (nothing polls)."""

from __future__ import annotations

from typing import Any

from nodecycle_sandbox.aws.group import SANDBOX_AMI
from nodecycle_sandbox.runner import Runner
from tests.sandbox.iam import test_enforcement as enforcement
from tests.sandbox.iam.test_enforcement import MANAGED, deployed

client, address, error = enforcement.client, enforcement.address, enforcement.error
Deployed = tuple[str, Runner]
__all__ = ["deployed"]  # (test_enforcement's deployment of the template, used here)
OWNER = "nodecycle"  # the deployed stack's owner id (its name)
CALL = {"LifecycleHookName": "h", "InstanceId": "i-0", "LifecycleActionResult": "CONTINUE"}
# Who completes and who heartbeats (the intake heartbeats a late action only)
COMPLETING = ("DrainFunction", "EipFunction", "SweeperFunction")
HEARTBEATING = ("IntakeFunction", *COMPLETING)


def _group(deployed: Deployed, owner: str | None) -> None:
    """The managed group (by name), tagged for ``owner`` (None: untagged), created or tagged anew."""
    autoscaling = client(deployed, "autoscaling")
    if not autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[MANAGED])["AutoScalingGroups"]:
        autoscaling.create_launch_configuration(
            LaunchConfigurationName="lc", ImageId=SANDBOX_AMI, InstanceType="t3.micro"
        )
        autoscaling.create_auto_scaling_group(
            AutoScalingGroupName=MANAGED,
            LaunchConfigurationName="lc",
            MinSize=0,
            MaxSize=1,
            AvailabilityZones=[f"{enforcement.REGION}a"],
        )
    tag = {"ResourceId": MANAGED, "ResourceType": "auto-scaling-group", "Key": "nodecycle:owner"}
    if owner is None:
        autoscaling.delete_tags(Tags=[tag])
    else:
        autoscaling.create_or_update_tags(Tags=[{**tag, "Value": owner, "PropagateAtLaunch": True}])


def _code(deployed: Deployed, function: str, operation: str) -> str:
    """What the function's call on an action of the managed group hears: AccessDenied (IAM), or Auto Scaling's own
    ValidationError (authorized: there is no such action)."""
    call: dict[str, Any] = {
        key: value for key, value in CALL.items() if operation == "complete" or key != "LifecycleActionResult"
    }
    autoscaling = client(deployed, "autoscaling", function)
    method = (
        autoscaling.complete_lifecycle_action
        if operation == "complete"
        else autoscaling.record_lifecycle_action_heartbeat
    )
    return str(error(method, AutoScalingGroupName=MANAGED, **call)["Code"])


def test_the_actions_of_a_named_group_tagged_for_another_owner_are_out_of_reach(deployed: Deployed) -> None:
    # Given the managed group (named in ManagedGroups), untagged: every role granted on it reaches Auto Scaling
    _group(deployed, None)
    for function in COMPLETING:
        assert _code(deployed, function, "complete") == "ValidationError", function
    for function in HEARTBEATING:
        assert _code(deployed, function, "heartbeat") == "ValidationError", function

    # When another stack takes it over by its tag (ManagedByTag there), Then no role of this stack may complete or
    # heartbeat its actions any more
    _group(deployed, "another-stack")
    for function in COMPLETING:
        assert _code(deployed, function, "complete") == "AccessDenied", function
    for function in HEARTBEATING:
        assert _code(deployed, function, "heartbeat") == "AccessDenied", function

    # And tagged for this very owner, it is this stack's as before
    _group(deployed, OWNER)
    for function in COMPLETING:
        assert _code(deployed, function, "complete") == "ValidationError", function
    for function in HEARTBEATING:
        assert _code(deployed, function, "heartbeat") == "ValidationError", function


def _instance(deployed: Deployed, **tags: str) -> str:
    ec2 = client(deployed, "ec2")
    spec = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]
    run = ec2.run_instances(ImageId=SANDBOX_AMI, MinCount=1, MaxCount=1, TagSpecifications=spec)
    return str(run["Instances"][0]["InstanceId"])


def test_an_address_is_not_associated_with_an_instance_of_the_group_tagged_for_another_owner(
    deployed: Deployed,
) -> None:
    # Given an address of this stack, and instances of the managed group (by name): untagged, tagged for this owner,
    # and tagged for another (the group's tag propagated at launch: intake takes that instance for the other's)
    eip = client(deployed, "ec2", "EipFunction")
    group = {"aws:autoscaling:groupName": MANAGED}
    theirs = _instance(deployed, **group, **{"nodecycle:owner": "another-stack"})
    untagged = _instance(deployed, **group)
    ours = _instance(deployed, **group, **{"nodecycle:owner": OWNER})

    # When the eip function associates the address with the other owner's instance, Then IAM refuses it (it would
    # knock that owner's own address off the instance's primary private IP)
    allocation = address(deployed, **{"nodecycle:owner": OWNER})
    denied = error(
        eip.associate_address, AllocationId=allocation, InstanceId=theirs, AllowReassociation=False
    )
    assert denied["Code"] == "UnauthorizedOperation"
    assert f"ec2:AssociateAddress on resource: arn:aws:ec2:{enforcement.REGION}" in denied["Message"]
    assert f"instance/{theirs}" in denied["Message"]

    # And with the others it is associated, as before
    for instance in (untagged, ours):
        associated = eip.associate_address(
            AllocationId=allocation, InstanceId=instance, AllowReassociation=False
        )
        eip.disassociate_address(AssociationId=associated["AssociationId"])
