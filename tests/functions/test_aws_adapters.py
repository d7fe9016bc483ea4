"""The exact requests the AWS adapters make, and how they read AWS's answers (botocore Stubber: the request
shape is what matters here, and moto would accept a wrong one)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from nodecycle.adapters.aws.addresses import Ec2Addresses
from nodecycle.adapters.aws.autoscaling import AutoscalingActions
from nodecycle.adapters.aws.queues import SqsWorkQueues
from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle.domain.errors import TransientError
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import ActionRef, Step, Transition, adopted_token
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.addresses import InstanceUnavailable
from nodecycle.domain.ports.lifecycle import WorkMessage
from tests.unit.foundation.test_engine import PLAN, make_record

TOKEN = "9f0c3d3e-6a8b-4c8e-9d57-2f7b1e0a6c41"
ACTION = ActionRef(
    group="nodes-general",
    hook="nodecycle-terminate",
    instance_id="i-0a1b2c3d4e5f60718",
    token=TOKEN,
    transition=Transition.TERMINATING,
)
ACTION_PARAMS = {
    "AutoScalingGroupName": "nodes-general",
    "LifecycleHookName": "nodecycle-terminate",
    "InstanceId": "i-0a1b2c3d4e5f60718",
    "LifecycleActionToken": TOKEN,
}


@pytest.fixture
def autoscaling() -> Iterator[tuple[AutoscalingActions, Stubber]]:
    client = boto3.client("autoscaling")
    with Stubber(client) as stubber:
        yield AutoscalingActions(client), stubber
        stubber.assert_no_pending_responses()


def _instance(instance_id: str, state: str) -> dict[str, Any]:
    return {
        "InstanceId": instance_id,
        "AvailabilityZone": "eu-west-1a",
        "LifecycleState": state,
        "HealthStatus": "Healthy",
        "ProtectedFromScaleIn": False,
    }


def _group(
    name: str,
    states: dict[str, str],
    *,
    tags: dict[str, str] | None = None,
    pool: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A group as DescribeAutoScalingGroups answers it, with its warm pool's configuration when it has one."""
    return {
        **({"WarmPoolConfiguration": pool} if pool is not None else {}),
        "AutoScalingGroupName": name,
        "MinSize": 0,
        "MaxSize": 9,
        "DesiredCapacity": len(states),
        "DefaultCooldown": 300,
        "AvailabilityZones": ["eu-west-1a"],
        "HealthCheckType": "EC2",
        "CreatedTime": datetime(2026, 1, 1, tzinfo=UTC),
        "Tags": [{"Key": k, "Value": v} for k, v in (tags or {}).items()],
        "Instances": [_instance(instance, state) for instance, state in states.items()],
    }


STOPPED_POOL = {"MinSize": 2, "PoolState": "Stopped"}


def test_complete_names_the_action_by_its_instance_with_the_result(
    autoscaling: tuple[AutoscalingActions, Stubber],
) -> None:
    # (not by its token: the action settled is the instance's, whatever instance the token's is)
    adapter, stubber = autoscaling
    by_instance = {key: value for key, value in ACTION_PARAMS.items() if key != "LifecycleActionToken"}
    stubber.add_response(
        "complete_lifecycle_action", {}, {**by_instance, "LifecycleActionResult": "CONTINUE"}
    )
    assert adapter.complete(ACTION, ActionResult.CONTINUE) is True


def test_a_heartbeat_names_the_action_by_token(autoscaling: tuple[AutoscalingActions, Stubber]) -> None:
    adapter, stubber = autoscaling
    stubber.add_response("record_lifecycle_action_heartbeat", {}, ACTION_PARAMS)
    assert adapter.heartbeat(ACTION) is True


def test_an_adopted_action_is_named_by_its_instance_without_a_token(
    autoscaling: tuple[AutoscalingActions, Stubber],
) -> None:
    # (no API tells an action's token: an adopted lifecycle's token is nodecycle's own and is never sent)
    adapter, stubber = autoscaling
    # (a completion only while the instance is still where the action holds it: by instance id, Auto Scaling
    # would settle whatever action the hook holds for the instance now)
    adopted = ACTION.model_copy(update={"token": adopted_token(ACTION.hook)})
    by_instance = {k: v for k, v in ACTION_PARAMS.items() if k != "LifecycleActionToken"}
    held = {
        "AutoScalingInstances": [
            {
                "InstanceId": ACTION.instance_id,
                "AutoScalingGroupName": ACTION.group,
                "AvailabilityZone": "eu-west-1a",
                "LifecycleState": "Terminating:Wait",
                "HealthStatus": "HEALTHY",
                "ProtectedFromScaleIn": False,
            }
        ]
    }
    asked = {"InstanceIds": [ACTION.instance_id]}
    stubber.add_response("record_lifecycle_action_heartbeat", {}, by_instance)
    stubber.add_response("describe_auto_scaling_instances", held, asked)
    stubber.add_response(
        "complete_lifecycle_action", {}, {**by_instance, "LifecycleActionResult": "CONTINUE"}
    )
    assert adapter.heartbeat(adopted) is True
    assert adapter.complete(adopted, ActionResult.CONTINUE) is True


def test_the_held_instances_of_named_and_tagged_groups_are_listed_in_one_call_each(
    autoscaling: tuple[AutoscalingActions, Stubber],
) -> None:
    adapter, stubber = autoscaling

    named = _group("nodes-a", {"i-01": "InService", "i-02": "Terminating:Wait"}, pool=STOPPED_POOL)
    tagged = _group("nodes-b", {"i-04": "Pending:Wait"}, tags={"nodecycle:owner": "stack-a"})
    stubber.add_response(
        "describe_auto_scaling_groups", {"AutoScalingGroups": [named]}, {"AutoScalingGroupNames": ["nodes-a"]}
    )
    stubber.add_response(
        "describe_auto_scaling_groups",
        {"AutoScalingGroups": [tagged, named]},  # a group both named and tagged: listed once
        {"Filters": [{"Name": "tag:nodecycle:owner", "Values": ["stack-a"]}]},
    )
    # (the warm pool's instances are listed by DescribeWarmPool alone, once a group)
    warmed = {"i-03": "Warmed:Pending:Wait", "i-05": "Warmed:Terminating:Wait", "i-06": "Warmed:Stopped"}
    stubber.add_response(
        "describe_warm_pool",
        {"Instances": [_instance(instance, state) for instance, state in warmed.items()]},
        {"AutoScalingGroupName": "nodes-a"},
    )

    found = adapter.waiting_instances(("nodes-a",), "stack-a")

    # (a warm pool's own wait states are hooks' actions too: a launch into the pool, a termination from it, as
    # their events would say, for the plan depends on it)
    assert sorted(
        (w.group, w.instance_id, w.transition, dict(w.group_tags), w.origin, w.destination) for w in found
    ) == [
        ("nodes-a", "i-02", Transition.TERMINATING, {}, None, None),
        ("nodes-a", "i-03", Transition.LAUNCHING, {}, None, "WarmPool"),
        ("nodes-a", "i-03", Transition.TERMINATING, {}, "AutoScalingGroup", "WarmPool"),  # (see below)
        ("nodes-a", "i-05", Transition.TERMINATING, {}, "WarmPool", "EC2"),
        ("nodes-b", "i-04", Transition.LAUNCHING, {"nodecycle:owner": "stack-a"}, None, None),
    ]


def test_an_instance_in_warmed_pending_wait_is_listed_as_a_launch_into_the_pool_and_a_return_to_it(
    autoscaling: tuple[AutoscalingActions, Stubber],
) -> None:
    # Given a group whose warm pool takes instances back on scale in (InstanceReusePolicy ReuseOnScaleIn): an
    # instance scaled in waits in Warmed:Pending:Wait under the group's EC2_INSTANCE_TERMINATING hook, the
    # state a launch into the pool waits in under its launch hook (AWS: "Use lifecycle hooks with a warm pool")
    adapter, stubber = autoscaling
    reusing = {**STOPPED_POOL, "InstanceReusePolicy": {"ReuseOnScaleIn": True}}
    group = _group("nodes-a", {}, pool=reusing)
    stubber.add_response(
        "describe_auto_scaling_groups", {"AutoScalingGroups": [group]}, {"AutoScalingGroupNames": ["nodes-a"]}
    )
    stubber.add_response(
        "describe_warm_pool",
        {"Instances": [_instance("i-07", "Warmed:Pending:Wait")]},
        {"AutoScalingGroupName": "nodes-a"},
    )

    found = adapter.waiting_instances(("nodes-a",), None)

    # Then the state cannot tell which hook holds it: it is listed as both moves, so that the sweep probes the
    # hooks of each transition (only the one that holds it accepts the heartbeat), and a scale-in whose event
    # was lost is found and drained before the instance is stopped in the pool with its pods
    assert sorted((w.instance_id, w.transition, w.origin, w.destination) for w in found) == [
        ("i-07", Transition.LAUNCHING, None, "WarmPool"),
        ("i-07", Transition.TERMINATING, "AutoScalingGroup", "WarmPool"),
    ]


def test_the_held_instances_of_a_groups_warm_pool_are_listed_from_the_pool_page_by_page(
    autoscaling: tuple[AutoscalingActions, Stubber],
) -> None:
    # Given a group with a warm pool: AWS lists the group's instances in DescribeAutoScalingGroups, and those of
    # its warm pool (Warmed:*) only in DescribeWarmPool, 50 at most a page
    adapter, stubber = autoscaling
    pooled = {**_group("nodes-a", {"i-01": "Terminating:Wait"}, pool=STOPPED_POOL), "WarmPoolSize": 3}
    stubber.add_response(
        "describe_auto_scaling_groups",
        {"AutoScalingGroups": [pooled]},
        {"AutoScalingGroupNames": ["nodes-a"]},
    )
    stubber.add_response(
        "describe_warm_pool",
        {
            "Instances": [_instance("i-02", "Warmed:Terminating:Wait"), _instance("i-03", "Warmed:Stopped")],
            "NextToken": "page-2",
        },
        {"AutoScalingGroupName": "nodes-a"},
    )
    stubber.add_response(
        "describe_warm_pool",
        {"Instances": [_instance("i-04", "Warmed:Pending:Wait")]},
        {"AutoScalingGroupName": "nodes-a", "NextToken": "page-2"},
    )

    found = adapter.waiting_instances(("nodes-a",), None)

    # Then the pool's held instances are listed with the group's: a termination from the pool, a launch into it
    # (or a scale-in into it), whose lost events the sweep adopts as any other
    assert sorted((w.instance_id, w.transition, w.origin, w.destination) for w in found) == [
        ("i-01", Transition.TERMINATING, None, None),
        ("i-02", Transition.TERMINATING, "WarmPool", "EC2"),
        ("i-04", Transition.LAUNCHING, None, "WarmPool"),
        ("i-04", Transition.TERMINATING, "AutoScalingGroup", "WarmPool"),
    ]


def test_a_warm_pool_auto_scaling_no_longer_knows_lists_nothing(
    autoscaling: tuple[AutoscalingActions, Stubber],
) -> None:
    # Given a group deleted (or its pool) between the listing of the groups and the reading of its pool
    adapter, stubber = autoscaling
    pooled = _group("nodes-a", {"i-01": "Terminating:Wait"}, pool=STOPPED_POOL)
    stubber.add_response(
        "describe_auto_scaling_groups",
        {"AutoScalingGroups": [pooled]},
        {"AutoScalingGroupNames": ["nodes-a"]},
    )
    stubber.add_client_error(
        "describe_warm_pool", "ValidationError", "Group nodes-a not found", http_status_code=400
    )

    # Then the group's own held instances are listed, and the sweep goes on
    found = adapter.waiting_instances(("nodes-a",), None)
    assert [(w.instance_id, w.transition) for w in found] == [("i-01", Transition.TERMINATING)]


def test_the_hooks_of_a_group_auto_scaling_does_not_know_are_none_whichever_way_they_are_read(
    autoscaling: tuple[AutoscalingActions, Stubber],
) -> None:
    # Given a group deleted between the sweep's listing and its reading of the hooks: Auto Scaling answers a
    # ValidationError to DescribeLifecycleHooks for a group it does not know
    adapter, stubber = autoscaling
    for _ in range(2):
        stubber.add_client_error(
            "describe_lifecycle_hooks", "ValidationError", "Group nodes-gone not found", http_status_code=400
        )

    # Then one hook and all of them read alike: none (the port says so), not an error that fails the sweep
    assert adapter.hook("nodes-gone", "nodecycle-terminate") is None
    assert adapter.hooks_of("nodes-gone") == {}


def test_no_active_action_means_settled_even_while_another_hook_keeps_the_instance_waiting(
    autoscaling: tuple[AutoscalingActions, Stubber],
) -> None:
    # Given AWS refusing a completion of our action, as it does once the action is completed or timed out
    adapter, stubber = autoscaling
    stubber.add_client_error(
        "complete_lifecycle_action", "ValidationError", "No active Lifecycle Action found with token " + TOKEN
    )
    stubber.add_client_error(
        "record_lifecycle_action_heartbeat", "ValidationError", "No active Lifecycle Action found with token"
    )
    # Then the action counts as settled already (completing twice is harmless), and no heartbeat is owed
    assert adapter.complete(ACTION, ActionResult.CONTINUE) is False
    assert adapter.heartbeat(ACTION) is False


def test_other_errors_are_not_taken_for_a_settled_action(
    autoscaling: tuple[AutoscalingActions, Stubber],
) -> None:
    adapter, stubber = autoscaling
    stubber.add_client_error("complete_lifecycle_action", "AccessDenied", "not authorized", 403)
    # (a refusal is looked into: the instance still in the action's group, the group is there, the refusal stands)
    listed = {
        "AutoScalingInstances": [
            {**_instance(ACTION.instance_id, "Terminating:Wait"), "AutoScalingGroupName": ACTION.group}
        ]
    }
    stubber.add_response("describe_auto_scaling_instances", listed, {"InstanceIds": [ACTION.instance_id]})
    with pytest.raises(Exception, match="not authorized"):
        adapter.complete(ACTION, ActionResult.CONTINUE)


def test_throttling_is_a_transient_error(autoscaling: tuple[AutoscalingActions, Stubber]) -> None:
    adapter, stubber = autoscaling
    stubber.add_client_error("record_lifecycle_action_heartbeat", "Throttling", "Rate exceeded", 400)
    with pytest.raises(TransientError, match="Rate exceeded"):
        adapter.heartbeat(ACTION)


def test_a_record_write_that_meets_a_transaction_on_its_item_is_a_transient_error() -> None:
    """DynamoDB refuses a PutItem on an item another writer's transaction holds (intake or the sweeper writing
    a record with its claim) with TransactionConflictException, which botocore's standard mode does not retry:
    the write is worth trying again (a step's later retry), not an unknown error that fails the message."""
    client = boto3.client("dynamodb")
    with Stubber(client) as stubber:
        stubber.add_client_error(
            "put_item", "TransactionConflictException", "Transaction is ongoing for the item", 400
        )
        store = DynamoRecordStore("lifecycles", timedelta(days=1), client)
        with pytest.raises(TransientError, match="Transaction is ongoing"):
            store.commit(make_record(PLAN), expected_seq=2)


def test_a_work_message_goes_to_its_workers_queue_with_its_delay() -> None:
    client = boto3.client("sqs")
    message = WorkMessage(record_id=f"{ACTION.instance_id}/terminate/{TOKEN}", seq=3, step=Step.EVICT)
    with Stubber(client) as stubber:
        stubber.add_response(
            "send_message",
            {"MessageId": "m-1", "MD5OfMessageBody": "x"},
            {
                "QueueUrl": "https://sqs.eu-west-1.amazonaws.com/123456789012/drain",
                # defaults (no watch, no wake) are left out: the body names the record, its seq and step
                "MessageBody": f'{{"record_id":"{message.record_id}","seq":3,"step":"evict"}}',
                "DelaySeconds": 17,
            },
        )
        queues = SqsWorkQueues(
            {Worker.DRAIN: "https://sqs.eu-west-1.amazonaws.com/123456789012/drain", Worker.EIP: "eip"},
            client,
        )
        queues.send(Worker.DRAIN, message, delay_seconds=17)
        stubber.assert_no_pending_responses()


def test_an_address_goes_to_the_primary_interface_of_an_instance_with_several() -> None:
    # Given an instance the VPC CNI has given a second network interface (EC2 then refuses an instance id)
    client = boto3.client("ec2")
    instance = "i-0a1b2c3d4e5f60718"
    with Stubber(client) as stubber:
        stubber.add_client_error(
            "associate_address",
            "InvalidInstanceID",
            "There are multiple interfaces attached to instance. Please specify an interface ID.",
            expected_params={
                "AllocationId": "eipalloc-1",
                "InstanceId": instance,
                "AllowReassociation": False,
            },
        )
        stubber.add_response(
            "describe_instances",
            {
                "Reservations": [
                    {
                        "Instances": [
                            {
                                "InstanceId": instance,
                                "State": {"Name": "running", "Code": 16},
                                "NetworkInterfaces": [
                                    {"NetworkInterfaceId": "eni-secondary", "Attachment": {"DeviceIndex": 1}},
                                    {"NetworkInterfaceId": "eni-primary", "Attachment": {"DeviceIndex": 0}},
                                ],
                            }
                        ]
                    }
                ]
            },
            {"Filters": [{"Name": "instance-id", "Values": [instance]}]},
        )
        stubber.add_response(
            "associate_address",
            {"AssociationId": "eipassoc-1"},
            {"AllocationId": "eipalloc-1", "NetworkInterfaceId": "eni-primary", "AllowReassociation": False},
        )

        # When the address is associated
        association = Ec2Addresses(client).associate("eipalloc-1", instance)

        # Then it went to the primary interface, still without taking it from anyone
        assert association == "eipassoc-1"
        stubber.assert_no_pending_responses()


def test_an_instance_that_is_not_running_is_unavailable_for_an_address() -> None:
    client = boto3.client("ec2")
    instance = "i-0a1b2c3d4e5f60718"
    with Stubber(client) as stubber:
        stubber.add_client_error("associate_address", "InvalidInstanceID", "not in a valid state")
        stubber.add_response(
            "describe_instances",
            {
                "Reservations": [
                    {"Instances": [{"InstanceId": instance, "State": {"Name": "pending", "Code": 0}}]}
                ]
            },
        )
        with pytest.raises(InstanceUnavailable):
            Ec2Addresses(client).associate("eipalloc-1", instance)
