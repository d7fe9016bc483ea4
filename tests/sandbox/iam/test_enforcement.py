"""Each function may call AWS only as its role in template.yaml allows, and a denied call fails exactly as
AWS fails it. moto in this process, the real template deployed by the runner (nothing polls or runs)."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from nodecycle_sandbox.aws.eks import point_cluster
from nodecycle_sandbox.aws.group import SANDBOX_AMI
from nodecycle_sandbox.aws.server import MotoServer
from nodecycle_sandbox.iam.enforce import AccessDenied, authorize_service_role
from nodecycle_sandbox.iam.evaluate import Request, context_of
from nodecycle_sandbox.iam.identities import IDENTITIES
from nodecycle_sandbox.runner import Runner

ROOT = Path(__file__).resolve().parents[3]
REGION = "eu-west-1"
ACCOUNT = "123456789012"
OPERATOR = "AKIATESTOPERATOR0000"
MANAGED = "nodes-a"


def session(function: str) -> str:
    return f"arn:aws:sts::{ACCOUNT}:assumed-role/nodecycle-{function}Role/nodecycle-{function}"


def reset(url: str) -> None:
    """moto's state, which is per process, emptied (another module may share the worker)."""
    urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST")).close()


@pytest.fixture(scope="module")
def deployed() -> Iterator[tuple[str, Runner]]:
    server = MotoServer()
    url = server.start()
    reset(url)
    # the cluster the template's access entries are for (CloudFormation would fail without it)
    point_cluster(
        account=ACCOUNT,
        region=REGION,
        name="sandbox",
        endpoint="https://127.0.0.1:1",
        ca_pem="",
        authentication_mode="API",
    )
    runner = Runner(
        template=ROOT / "template.yaml",
        root=ROOT,
        endpoint_url=url,
        region=REGION,
        parameters={"ClusterName": "sandbox", "ManagedGroups": MANAGED, "EipMode": "allocate"},
        mode="inline",
        sqs_sources_enabled=False,
        schedules_enabled=False,
        identities=IDENTITIES.register,
    ).start()
    yield url, runner
    runner.stop()
    IDENTITIES.clear()
    reset(url)
    server.stop()


def client(deployed: tuple[str, Runner], service: str, function: str | None = None) -> Any:
    url, runner = deployed
    key = runner.access_key(function) if function else OPERATOR
    return boto3.client(  # type: ignore[call-overload]
        service, endpoint_url=url, region_name=REGION, aws_access_key_id=key, aws_secret_access_key="x"
    )


def address(deployed: tuple[str, Runner], **tags: str) -> str:
    ec2 = client(deployed, "ec2")
    spec = [{"ResourceType": "elastic-ip", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]
    return str(ec2.allocate_address(Domain="vpc", TagSpecifications=spec)["AllocationId"])


def instance(deployed: tuple[str, Runner], group: str) -> str:
    ec2 = client(deployed, "ec2")
    tags = [{"ResourceType": "instance", "Tags": [{"Key": "aws:autoscaling:groupName", "Value": group}]}]
    image = SANDBOX_AMI
    run = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, TagSpecifications=tags)
    return str(run["Instances"][0]["InstanceId"])


def error(call: Any, **kwargs: Any) -> dict[str, Any]:
    with pytest.raises(ClientError) as raised:
        call(**kwargs)
    return {
        **raised.value.response["Error"],
        "status": raised.value.response["ResponseMetadata"]["HTTPStatusCode"],
    }


def test_the_intake_function_may_not_release_an_address_the_eip_function_may(
    deployed: tuple[str, Runner],
) -> None:
    # Given an address of this stack
    allocation = address(deployed, **{"nodecycle:owner": "nodecycle"})
    arn = f"arn:aws:ec2:{REGION}:{ACCOUNT}:elastic-ip/{allocation}"

    # When the intake function releases it, Then EC2 refuses as it does, naming the action and the address
    denied = error(client(deployed, "ec2", "IntakeFunction").release_address, AllocationId=allocation)
    assert (denied["Code"], denied["status"]) == ("UnauthorizedOperation", 403)
    assert denied["Message"].startswith(
        f"You are not authorized to perform this operation. User: {session('IntakeFunction')} is not "
        f"authorized to perform: ec2:ReleaseAddress on resource: {arn} because no identity-based policy "
        "allows the ec2:ReleaseAddress action. Encoded authorization failure message: "
    )
    assert client(deployed, "ec2").describe_addresses(AllocationIds=[allocation])["Addresses"]

    # And the eip function may release it
    client(deployed, "ec2", "EipFunction").release_address(AllocationId=allocation)
    assert allocation not in {
        a["AllocationId"] for a in client(deployed, "ec2").describe_addresses()["Addresses"]
    }


def test_a_pool_address_is_never_released_even_by_its_owner(deployed: tuple[str, Runner]) -> None:
    allocation = address(deployed, **{"nodecycle:owner": "nodecycle", "nodecycle:pool": "blue"})
    for function in ("EipFunction", "SweeperFunction"):
        denied = error(client(deployed, "ec2", function).release_address, AllocationId=allocation)
        assert denied["Code"] == "UnauthorizedOperation"
        assert "ec2:ReleaseAddress on resource" in denied["Message"]
        assert "with an explicit deny in an identity-based policy" in denied["Message"]


def test_addresses_of_another_owner_are_out_of_reach(deployed: tuple[str, Runner]) -> None:
    theirs = address(deployed, **{"nodecycle:owner": "someone-else"})
    target = instance(deployed, MANAGED)
    eip = client(deployed, "ec2", "EipFunction")
    assert error(eip.release_address, AllocationId=theirs)["Code"] == "UnauthorizedOperation"
    assert (
        error(eip.associate_address, AllocationId=theirs, InstanceId=target)["Code"]
        == "UnauthorizedOperation"
    )


def test_new_addresses_must_carry_the_owner_tag_from_their_creation(deployed: tuple[str, Runner]) -> None:
    eip = client(deployed, "ec2", "EipFunction")
    denied = error(eip.allocate_address, Domain="vpc")
    assert (
        f"ec2:AllocateAddress on resource: arn:aws:ec2:{REGION}:{ACCOUNT}:elastic-ip/*" in denied["Message"]
    )
    mine = [{"ResourceType": "elastic-ip", "Tags": [{"Key": "nodecycle:owner", "Value": "nodecycle"}]}]
    assert eip.allocate_address(Domain="vpc", TagSpecifications=mine)["AllocationId"]


def test_addresses_are_associated_with_instances_of_the_managed_groups_only(
    deployed: tuple[str, Runner],
) -> None:
    eip = client(deployed, "ec2", "EipFunction")
    stray = instance(deployed, "someone-elses-group")
    allocation = address(deployed, **{"nodecycle:owner": "nodecycle"})

    denied = error(eip.associate_address, AllocationId=allocation, InstanceId=stray, AllowReassociation=False)
    assert (
        f"ec2:AssociateAddress on resource: arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{stray}"
        in denied["Message"]
    )

    ours = instance(deployed, MANAGED)
    assert eip.associate_address(AllocationId=allocation, InstanceId=ours, AllowReassociation=False)[
        "AssociationId"
    ]


def test_lifecycle_actions_of_unmanaged_groups_cannot_be_completed(deployed: tuple[str, Runner]) -> None:
    autoscaling = client(deployed, "autoscaling")
    image = SANDBOX_AMI
    autoscaling.create_launch_configuration(
        LaunchConfigurationName="lc", ImageId=image, InstanceType="t3.micro"
    )
    for name in (MANAGED, "not-ours"):
        autoscaling.create_auto_scaling_group(
            AutoScalingGroupName=name,
            LaunchConfigurationName="lc",
            MinSize=0,
            MaxSize=1,
            AvailabilityZones=[f"{REGION}a"],
        )
    arn = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=["not-ours"])["AutoScalingGroups"][
        0
    ]["AutoScalingGroupARN"]
    call = {"LifecycleHookName": "h", "InstanceId": "i-0", "LifecycleActionResult": "CONTINUE"}
    drain = client(deployed, "autoscaling", "DrainFunction")

    denied = error(drain.complete_lifecycle_action, AutoScalingGroupName="not-ours", **call)
    assert (denied["Code"], denied["status"]) == ("AccessDenied", 403)
    assert denied["Message"] == (
        f"User: {session('DrainFunction')} is not authorized to perform: autoscaling:CompleteLifecycleAction "
        f"on resource: {arn} because no identity-based policy allows the autoscaling:CompleteLifecycleAction action"
    )
    # The managed group is reachable: Auto Scaling itself answers (there is no such action)
    assert (
        error(drain.complete_lifecycle_action, AutoScalingGroupName=MANAGED, **call)["Code"]
        == "ValidationError"
    )
    intake = client(deployed, "autoscaling", "IntakeFunction")
    assert (
        error(intake.complete_lifecycle_action, AutoScalingGroupName=MANAGED, **call)["Code"]
        == "AccessDenied"
    )


def test_each_function_reaches_its_own_queues_only(deployed: tuple[str, Runner]) -> None:
    _, runner = deployed
    drain_queue = runner.queue("DrainQueue")
    sweeper = client(deployed, "sqs", "SweeperFunction")
    denied = error(sweeper.receive_message, QueueUrl=drain_queue.url)
    assert denied["Code"] == "AccessDenied"
    assert denied["Message"] == (
        f"User: {session('SweeperFunction')} is not authorized to perform: sqs:receivemessage on resource: "
        f"{drain_queue.arn} because no identity-based policy allows the sqs:receivemessage action"
    )
    client(deployed, "sqs", "DrainFunction").receive_message(QueueUrl=drain_queue.url)
    dead_letters = runner.queue("IntakeDeadLetterQueue").url
    assert error(
        client(deployed, "sqs", "DrainFunction").send_message, QueueUrl=dead_letters, MessageBody="x"
    )
    # (intake hands an event from EventBridge retried on purpose to its own queue: functions/intake/app.py)
    intake_queue = runner.queue("IntakeQueue").url
    client(deployed, "sqs", "IntakeFunction").send_message(QueueUrl=intake_queue, MessageBody="{}")
    assert error(
        client(deployed, "sqs", "DrainFunction").send_message, QueueUrl=intake_queue, MessageBody="x"
    )


def test_dynamodb_and_eks_refuse_with_their_own_error_shape(deployed: tuple[str, Runner]) -> None:
    _, runner = deployed
    table = runner.table("LifecycleTable")
    denied = error(
        client(deployed, "dynamodb", "IntakeFunction").query,
        TableName=table.name,
        IndexName="open-by-due",
        KeyConditionExpression="open_owner = :o",
        ExpressionAttributeValues={":o": {"S": "nodecycle"}},
    )
    assert (denied["Code"], denied["status"]) == ("AccessDeniedException", 400)
    assert f"dynamodb:Query on resource: {table.arn}/index/open-by-due" in denied["Message"]
    denied = error(client(deployed, "eks", "EipFunction").describe_cluster, name="sandbox")
    assert denied["Code"] == "AccessDeniedException"
    assert (
        f"eks:DescribeCluster on resource: arn:aws:eks:{REGION}:{ACCOUNT}:cluster/sandbox"
        in denied["Message"]
    )


def test_the_operator_stays_an_administrator(deployed: tuple[str, Runner]) -> None:
    allocation = address(deployed, **{"nodecycle:pool": "blue"})
    client(deployed, "ec2").release_address(AllocationId=allocation)


def test_only_auto_scaling_for_this_accounts_groups_may_assume_the_hook_role(
    deployed: tuple[str, Runner],
) -> None:
    _, runner = deployed
    role = runner.roles["HookNotificationRole"]["arn"]
    queue = runner.queue("IntakeQueue").arn
    send = [Request("sqs:SendMessage", queue, context_of({"aws:RequestedRegion": REGION}))]
    group = f"arn:aws:autoscaling:{REGION}:{ACCOUNT}:autoScalingGroup:1:autoScalingGroupName/{MANAGED}"
    authorize_service_role(
        role, service="autoscaling.amazonaws.com", source_account=ACCOUNT, source_arn=group, requests=send
    )
    elsewhere = group.replace(ACCOUNT, "999999999999")
    with pytest.raises(AccessDenied, match="sts:AssumeRole"):
        authorize_service_role(
            role,
            service="autoscaling.amazonaws.com",
            source_account="999999999999",
            source_arn=elsewhere,
            requests=send,
        )
    with pytest.raises(AccessDenied, match="sts:AssumeRole"):
        authorize_service_role(
            role, service="sns.amazonaws.com", source_account=ACCOUNT, source_arn=group, requests=send
        )
    other_queue = runner.queue("DrainQueue").arn
    with pytest.raises(AccessDenied, match="sqs:sendmessage"):
        authorize_service_role(
            role,
            service="autoscaling.amazonaws.com",
            source_account=ACCOUNT,
            source_arn=group,
            requests=[Request("sqs:SendMessage", other_queue, context_of({}))],
        )


def test_a_transaction_is_authorized_as_each_of_its_writes_on_its_own_table(
    deployed: tuple[str, Runner],
) -> None:
    # Given the intake function, whose role may get and put the lifecycle table's items (and no more)
    _, runner = deployed
    table = runner.table("LifecycleTable")
    intake = client(deployed, "dynamodb", "IntakeFunction")

    def put(key: str) -> dict[str, Any]:
        return {"Put": {"TableName": table.name, "Item": {"id": {"S": key}}}}

    # When it writes two items in one transaction, Then each is a PutItem it may make
    intake.transact_write_items(TransactItems=[put("tx-a"), put("tx-b")])
    assert client(deployed, "dynamodb").get_item(TableName=table.name, Key={"id": {"S": "tx-b"}})["Item"]

    # When a transaction also deletes an item, Then it is refused as that DeleteItem, and nothing is written
    delete = {"Delete": {"TableName": table.name, "Key": {"id": {"S": "tx-a"}}}}
    denied = error(intake.transact_write_items, TransactItems=[put("tx-c"), delete])
    assert (denied["Code"], denied["status"]) == ("AccessDeniedException", 400)
    assert f"dynamodb:DeleteItem on resource: {table.arn}" in denied["Message"]
    assert "Item" not in client(deployed, "dynamodb").get_item(
        TableName=table.name, Key={"id": {"S": "tx-c"}}
    )


def test_a_batch_read_is_authorized_on_each_table_it_names(deployed: tuple[str, Runner]) -> None:
    # Given the drain function, whose role may read the lifecycle table's items together, and the intake
    # function, whose role may not
    _, runner = deployed
    table = runner.table("LifecycleTable")
    keys = {
        table.name: {"Keys": [{"id": {"S": "batch-a"}}, {"id": {"S": "batch-b"}}], "ConsistentRead": True}
    }

    # When each reads two items in one BatchGetItem, Then the drain function's is served, on the table it names
    answer = client(deployed, "dynamodb", "DrainFunction").batch_get_item(RequestItems=keys)
    assert answer["Responses"] == {table.name: []}
    # ...and the intake function's refused as a BatchGetItem on that table (not on "*": the request names no
    # TableName of its own)
    denied = error(client(deployed, "dynamodb", "IntakeFunction").batch_get_item, RequestItems=keys)
    assert (denied["Code"], denied["status"]) == ("AccessDeniedException", 400)
    assert f"dynamodb:BatchGetItem on resource: {table.arn}" in denied["Message"]


def test_an_action_a_role_is_not_granted_is_refused_even_on_a_resource_that_does_not_exist(
    deployed: tuple[str, Runner],
) -> None:
    # Given an address and a group that do not exist, When a function whose role grants the action on nothing
    # calls it, Then AWS refuses it as unauthorized (the sandbox let it through to the service, which answered
    # that the resource does not exist, telling the function that the call was permitted)
    missing = "eipalloc-0123456789abcdef0"
    intake_ec2 = client(deployed, "ec2", "IntakeFunction")
    denied = error(intake_ec2.release_address, AllocationId=missing)
    assert (denied["Code"], denied["status"]) == ("UnauthorizedOperation", 403)
    assert (
        f"ec2:ReleaseAddress on resource: arn:aws:ec2:{REGION}:{ACCOUNT}:elastic-ip/{missing}"
        in denied["Message"]
    )
    intake = client(deployed, "autoscaling", "IntakeFunction")
    call = {"LifecycleHookName": "h", "InstanceId": "i-0", "LifecycleActionResult": "CONTINUE"}
    denied = error(intake.complete_lifecycle_action, AutoScalingGroupName="no-such-group", **call)
    assert (denied["Code"], denied["status"]) == ("AccessDenied", 403)
    assert "autoscaling:CompleteLifecycleAction on resource: " in denied["Message"]

    # And a role that holds the action on its own (tagged) addresses only is refused it too: IAM decides before EC2
    # looks the address up, and a condition on a tag of a resource that does not exist is false (the sandbox let it
    # hear InvalidAllocationID.NotFound / InvalidAssociationID.NotFound, on which the EIP adapter counted a retried
    # release or disassociation as done)
    for function in ("EipFunction", "SweeperFunction"):
        ec2 = client(deployed, "ec2", function)
        denied = error(ec2.release_address, AllocationId=missing)
        assert (denied["Code"], denied["status"]) == ("UnauthorizedOperation", 403)
        arn = f"arn:aws:ec2:{REGION}:{ACCOUNT}:elastic-ip/{missing}"
        assert f"ec2:ReleaseAddress on resource: {arn}" in denied["Message"]
        gone = "eipassoc-0123456789abcdef0"
        assert error(ec2.disassociate_address, AssociationId=gone)["Code"] == "UnauthorizedOperation"
    # (an address released since, or an association ended since, likewise)
    owned = address(deployed, **{"nodecycle:owner": "nodecycle"})
    operator = client(deployed, "ec2")
    association = operator.associate_address(AllocationId=owned, InstanceId=instance(deployed, MANAGED))
    operator.disassociate_address(AssociationId=association["AssociationId"])
    operator.release_address(AllocationId=owned)
    eip = client(deployed, "ec2", "EipFunction")
    assert error(eip.release_address, AllocationId=owned)["Code"] == "UnauthorizedOperation"
    ended = association["AssociationId"]
    assert error(eip.disassociate_address, AssociationId=ended)["Code"] == "UnauthorizedOperation"


def test_a_group_that_does_not_exist_is_judged_by_its_name_and_without_tags(
    deployed: tuple[str, Runner],
) -> None:
    # Given the stack's roles, granted lifecycle actions on the managed group by name (nodes-a), When the drain
    # function completes an action of a group no role is granted and that does not exist, Then IAM refuses it: the
    # name is in the ARN whether or not the group exists, and none of the role's resources matches it (the
    # sandbox let a role granted the action on any group hear Auto Scaling's ValidationError, which the adapter
    # takes for an action settled)
    drain = client(deployed, "autoscaling", "DrainFunction")
    call = {"LifecycleHookName": "h", "InstanceId": "i-0", "LifecycleActionResult": "CONTINUE"}
    denied = error(drain.complete_lifecycle_action, AutoScalingGroupName="not-managed", **call)
    assert (denied["Code"], denied["status"]) == ("AccessDenied", 403)
    arn = f"arn:aws:autoscaling:{REGION}:{ACCOUNT}:autoScalingGroup:*:autoScalingGroupName/not-managed"
    assert f"autoscaling:CompleteLifecycleAction on resource: {arn}" in denied["Message"]
    # And the managed group's own name, gone (deleted with its actions), is granted: Auto Scaling answers it
    gone = error(drain.complete_lifecycle_action, AutoScalingGroupName=MANAGED, **call)
    assert gone["Code"] == "ValidationError"


def test_an_instance_that_does_not_exist_is_judged_without_tags(deployed: tuple[str, Runner]) -> None:
    # Given an address of this stack and an instance id EC2 does not have (terminated and aged out, or never was),
    # When the eip function associates the address with it, Then IAM refuses it: the grant on instances is
    # conditioned on their group's tag, which a missing instance does not have (the sandbox skipped the instance
    # side and let EC2 answer InvalidInstanceID.NotFound)
    owned = address(deployed, **{"nodecycle:owner": "nodecycle"})
    eip = client(deployed, "ec2", "EipFunction")
    missing = "i-0123456789abcdef0"
    denied = error(eip.associate_address, AllocationId=owned, InstanceId=missing)
    assert (denied["Code"], denied["status"]) == ("UnauthorizedOperation", 403)
    assert (
        f"ec2:AssociateAddress on resource: arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{missing}"
        in (denied["Message"])
    )
