"""A group's warm pool (PoolState Stopped, Running, Hibernated): its instances' states, their hooks' events,
DescribeWarmPool and its pages."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from nodecycle_sandbox.aws import LAUNCHING, TERMINATING
from nodecycle_sandbox.aws.group import AutoScalingGroup, HookSpec, WarmPoolSpec

from .conftest import Emulation

HOOKS = (
    HookSpec("launch", LAUNCHING, heartbeat_timeout=60, default_result="ABANDON"),
    HookSpec("drain", TERMINATING, heartbeat_timeout=60, default_result="CONTINUE"),
)
# One instance in the pool whatever the group's size (MaxGroupPreparedCapacity 0).
ONE_WARMED = WarmPoolSpec(min_size=1, max_group_prepared_capacity=0)
# A pool of what the group scaled in from one instance (the pool keeps 1 - desired).
REUSED = WarmPoolSpec(min_size=0, max_group_prepared_capacity=1, reuse_on_scale_in=True)


def _complete(aws: Emulation, hook: str, instance_id: str, transition: str, result: str = "CONTINUE") -> None:
    aws.autoscaling.complete_lifecycle_action(
        AutoScalingGroupName="workers",
        LifecycleHookName=hook,
        LifecycleActionToken=aws.bus.tokens(instance_id, transition)[-1],
        LifecycleActionResult=result,
    )


def _route(aws: Emulation, instance_id: str, transition: str) -> tuple[str, str]:
    """Origin and destination of the instance's latest lifecycle action event."""
    (*_, detail) = (
        e["detail"]
        for e in aws.bus.events
        if e["source"] == "aws.autoscaling"
        and e["detail"]["EC2InstanceId"] == instance_id
        and e["detail"]["LifecycleTransition"] == transition
    )
    return detail["Origin"], detail["Destination"]


def _ec2_state(aws: Emulation, instance_id: str) -> str:
    found = aws.ec2.describe_instances(InstanceIds=[instance_id])
    return str(found["Reservations"][0]["Instances"][0]["State"]["Name"])


def _state_changes(aws: Emulation, instance_id: str) -> list[str]:
    return [
        e["detail"]["state"]
        for e in aws.bus.events
        if e["source"] == "aws.ec2" and e["detail"]["instance-id"] == instance_id
    ]


def _warmed(aws: Emulation, group: AutoScalingGroup) -> str:
    """The one instance of the pool, its launch into it completed: stopped in the pool."""
    ((pooled, state),) = group.pool_instances().items()
    assert state == "Warmed:Pending:Wait"
    _complete(aws, "launch", pooled, LAUNCHING)
    return pooled


def test_an_instance_launched_into_the_pool_waits_for_the_launch_hook_then_is_stopped(aws: Emulation) -> None:
    # Given a group of none with a warm pool of one
    group = aws.group(*HOOKS, warm_pool=ONE_WARMED)

    # Then the pool's instance waits for the launch hook, which AWS tells as a launch from EC2 into the pool;
    # the group lists no instance (AWS lists the pool's in DescribeWarmPool alone)
    ((pooled, state),) = group.pool_instances().items()
    assert state == "Warmed:Pending:Wait"
    assert _route(aws, pooled, LAUNCHING) == ("EC2", "WarmPool")
    assert group.instances() == {}
    answer: Any = aws.autoscaling.describe_warm_pool(AutoScalingGroupName="workers")
    assert answer["WarmPoolConfiguration"]["PoolState"] == "Stopped"
    assert answer["WarmPoolConfiguration"]["MinSize"] == 1

    # When its action is completed
    _complete(aws, "launch", pooled, LAUNCHING)

    # Then it is stopped in the pool (EC2 telling of the stop), and it never joined the cluster
    assert group.pool_instances() == {pooled: "Warmed:Stopped"}
    assert _ec2_state(aws, pooled) == "stopped"
    assert _state_changes(aws, pooled) == ["stopping", "stopped"]
    assert aws.nodes.node_for_instance(pooled) is None
    (details,) = aws.autoscaling.describe_auto_scaling_instances(InstanceIds=[pooled])["AutoScalingInstances"]
    assert details["LifecycleState"] == "Warmed:Stopped"


def test_a_scale_out_takes_the_stopped_instance_from_the_pool_through_the_launch_hook(aws: Emulation) -> None:
    # Given a group of none with one stopped instance in its pool
    group = aws.group(*HOOKS, warm_pool=ONE_WARMED)
    pooled = _warmed(aws, group)

    # When the group scales out by one
    group.set_desired(1)

    # Then the pool's instance is started, its node joins, and it waits for the launch hook, which AWS tells as
    # a launch from the pool into the group; the pool launches a new instance in its place
    assert group.instances() == {pooled: "Pending:Wait"}
    assert _route(aws, pooled, LAUNCHING) == ("WarmPool", "AutoScalingGroup")
    assert _ec2_state(aws, pooled) == "running"
    assert aws.nodes.node_for_instance(pooled) is not None
    ((replacement, state),) = group.pool_instances().items()
    assert (replacement != pooled, state) == (True, "Warmed:Pending:Wait")

    # When its action is completed
    _complete(aws, "launch", pooled, LAUNCHING)

    # Then it is in service
    assert group.instances() == {pooled: "InService"}


def test_an_abandoned_launch_into_the_pool_terminates_the_instance_and_warms_another(aws: Emulation) -> None:
    # Given a group of none whose pool's instance waits for the launch hook
    group = aws.group(*HOOKS, warm_pool=ONE_WARMED)
    ((pooled, _),) = group.pool_instances().items()

    # When its action is abandoned
    _complete(aws, "launch", pooled, LAUNCHING, result="ABANDON")

    # Then it is terminated, and another instance is launched into the pool
    assert _ec2_state(aws, pooled) == "terminated"
    ((other, state),) = group.pool_instances().items()
    assert (other != pooled, state) == (True, "Warmed:Pending:Wait")


def test_with_reuse_on_scale_in_a_scaled_in_instance_goes_back_to_the_pool_under_the_terminate_hook(
    aws: Emulation,
) -> None:
    # Given a group of one in service whose warm pool takes instances back on scale in
    group = aws.group(*HOOKS, size=1, warm_pool=REUSED)
    (instance,) = group.instances()
    _complete(aws, "launch", instance, LAUNCHING)
    node = aws.nodes.node_for_instance(instance)
    assert node is not None
    assert group.pool_instances() == {}
    (described,) = aws.autoscaling.describe_auto_scaling_groups()["AutoScalingGroups"]
    assert described["WarmPoolConfiguration"]["InstanceReusePolicy"] == {"ReuseOnScaleIn": True}

    # When the group scales in to none
    group.set_desired(0)

    # Then the instance waits in Warmed:Pending:Wait for the terminate hook, which AWS tells as a move from the
    # group into the pool; it is still running
    assert group.pool_instances() == {instance: "Warmed:Pending:Wait"}
    assert group.instances() == {}
    assert _route(aws, instance, TERMINATING) == ("AutoScalingGroup", "WarmPool")
    assert _ec2_state(aws, instance) == "running"

    # When its action is completed
    _complete(aws, "drain", instance, TERMINATING)

    # Then it is stopped in the pool, its node kept (NotReady: its instance stopped)
    assert group.pool_instances() == {instance: "Warmed:Stopped"}
    assert _ec2_state(aws, instance) == "stopped"
    assert node in aws.nodes.nodes
    assert node in aws.nodes.stopped

    # When the group scales out again
    group.set_desired(1)

    # Then the same instance comes back from the pool, started, its node the same one, through the launch hook
    assert group.instances() == {instance: "Pending:Wait"}
    assert _route(aws, instance, LAUNCHING) == ("WarmPool", "AutoScalingGroup")
    assert node not in aws.nodes.stopped
    assert aws.nodes.node_for_instance(instance) == node
    _complete(aws, "launch", instance, LAUNCHING)
    assert group.instances() == {instance: "InService"}


def test_a_scale_in_to_the_pool_before_the_instance_is_in_service_ends_its_launch_action(
    aws: Emulation,
) -> None:
    # Given a group of one whose warm pool takes instances back on scale in, its instance still in Pending:Wait
    # under the launch hook (not yet in service)
    group = aws.group(*HOOKS, size=1, warm_pool=REUSED)
    (instance,) = group.instances()
    assert group.instances() == {instance: "Pending:Wait"}

    # When the group scales in to none: the instance goes back to the pool under the terminate hook
    group.set_desired(0)
    assert group.pool_instances() == {instance: "Warmed:Pending:Wait"}

    # Then its launch action ended with the move (as it does with a termination): its completion finds none, and
    # the instance stays where the terminate hook holds it, not put in service
    with pytest.raises(ClientError, match="No active Lifecycle Action found"):
        _complete(aws, "launch", instance, LAUNCHING)
    assert group.pool_instances() == {instance: "Warmed:Pending:Wait"}
    assert group.instances() == {}


def test_without_reuse_on_scale_in_a_scaled_in_instance_is_terminated(aws: Emulation) -> None:
    # Given a group of one in service with a warm pool that does not take instances back
    group = aws.group(*HOOKS, size=1, warm_pool=WarmPoolSpec(min_size=0, max_group_prepared_capacity=1))
    (instance,) = group.instances()
    _complete(aws, "launch", instance, LAUNCHING)

    # When the group scales in to none, and the instance's terminate action is completed
    group.set_desired(0)
    assert _route(aws, instance, TERMINATING) == ("AutoScalingGroup", "EC2")
    _complete(aws, "drain", instance, TERMINATING)

    # Then it is terminated, and the pool (now of one) warms a new instance instead
    assert _ec2_state(aws, instance) == "terminated"
    ((pooled, state),) = group.pool_instances().items()
    assert (pooled != instance, state) == (True, "Warmed:Pending:Wait")


def test_a_pool_made_smaller_terminates_its_excess_stopped_instance_through_the_terminate_hook(
    aws: Emulation,
) -> None:
    # Given a group of none with two stopped instances in its pool
    group = aws.group(*HOOKS, warm_pool=WarmPoolSpec(min_size=2, max_group_prepared_capacity=0))
    for pooled in group.pool_instances():
        _complete(aws, "launch", pooled, LAUNCHING)
    assert set(group.pool_instances().values()) == {"Warmed:Stopped"}

    # When the pool is made one smaller
    group.put_warm_pool(WarmPoolSpec(min_size=1, max_group_prepared_capacity=0))

    # Then one of its instances waits in Warmed:Terminating:Wait for the terminate hook, which AWS tells as a
    # termination from the pool
    (leaving,) = [i for i, s in group.pool_instances().items() if s == "Warmed:Terminating:Wait"]
    assert _route(aws, leaving, TERMINATING) == ("WarmPool", "EC2")

    # When its action is completed, it is terminated, and the pool keeps the other
    _complete(aws, "drain", leaving, TERMINATING)
    assert _ec2_state(aws, leaving) == "terminated"
    assert list(group.pool_instances().values()) == ["Warmed:Stopped"]


def test_a_pool_state_aws_does_not_know_is_refused(aws: Emulation) -> None:
    # Given a group
    aws.group(*HOOKS)

    # When a warm pool in a state AWS has no such name for is put, it is refused
    with pytest.raises(ClientError) as refused:
        aws.autoscaling.put_warm_pool(AutoScalingGroupName="workers", MinSize=1, PoolState="Sleeping")
    assert refused.value.response["Error"]["Code"] == "ValidationError"


# A pool of what the group scaled in from one instance, kept running.
REUSED_RUNNING = WarmPoolSpec(
    min_size=0, max_group_prepared_capacity=1, reuse_on_scale_in=True, pool_state="Running"
)


def test_an_instance_launched_into_a_running_pool_waits_there_running_without_joining_the_cluster(
    aws: Emulation,
) -> None:
    # Given a group of none with a running warm pool of one
    group = aws.group(
        *HOOKS, warm_pool=WarmPoolSpec(min_size=1, max_group_prepared_capacity=0, pool_state="Running")
    )
    answer: Any = aws.autoscaling.describe_warm_pool(AutoScalingGroupName="workers")
    assert answer["WarmPoolConfiguration"]["PoolState"] == "Running"

    # When the launch into the pool is completed
    pooled = _warmed(aws, group)

    # Then the instance waits running in the pool, EC2 told of no stop, and it has not joined the cluster (the
    # user data AWS documents for warm pools starts the kubelet only once the instance leaves the pool)
    assert group.pool_instances() == {pooled: "Warmed:Running"}
    assert _ec2_state(aws, pooled) == "running"
    assert _state_changes(aws, pooled) == []
    assert aws.nodes.node_for_instance(pooled) is None

    # When the group scales out by one
    group.set_desired(1)

    # Then the instance leaves the pool through the launch hook, its node joining, and goes in service
    assert group.instances() == {pooled: "Pending:Wait"}
    assert _route(aws, pooled, LAUNCHING) == ("WarmPool", "AutoScalingGroup")
    assert aws.nodes.node_for_instance(pooled) is not None
    _complete(aws, "launch", pooled, LAUNCHING)
    assert group.instances() == {pooled: "InService"}


def test_with_reuse_on_scale_in_a_scaled_in_instance_waits_in_a_running_pool_its_node_ready(
    aws: Emulation,
) -> None:
    # Given a group of one in service whose running warm pool takes instances back on scale in
    group = aws.group(*HOOKS, size=1, warm_pool=REUSED_RUNNING)
    (instance,) = group.instances()
    _complete(aws, "launch", instance, LAUNCHING)
    node = aws.nodes.node_for_instance(instance)
    assert node is not None

    # When the group scales in to none, and the instance's move into the pool is completed
    group.set_desired(0)
    assert group.pool_instances() == {instance: "Warmed:Pending:Wait"}
    assert _route(aws, instance, TERMINATING) == ("AutoScalingGroup", "WarmPool")
    _complete(aws, "drain", instance, TERMINATING)

    # Then it waits running in the pool: no stop, its node kept and Ready (its kubelet alive)
    assert group.pool_instances() == {instance: "Warmed:Running"}
    assert group.instances() == {}
    assert _ec2_state(aws, instance) == "running"
    assert _state_changes(aws, instance) == []
    assert node in aws.nodes.nodes
    assert node not in aws.nodes.stopped

    # When the group scales out again
    group.set_desired(1)

    # Then the same instance comes back through the launch hook, its node the same one, in service once completed
    assert group.instances() == {instance: "Pending:Wait"}
    assert _route(aws, instance, LAUNCHING) == ("WarmPool", "AutoScalingGroup")
    assert aws.nodes.node_for_instance(instance) == node
    assert node not in aws.nodes.stopped
    _complete(aws, "launch", instance, LAUNCHING)
    assert group.instances() == {instance: "InService"}


def test_a_scaled_in_instance_in_a_hibernated_pool_is_stopped_its_node_not_ready(aws: Emulation) -> None:
    # Given a group of one in service whose hibernated warm pool takes instances back on scale in
    pool = WarmPoolSpec(
        min_size=0, max_group_prepared_capacity=1, reuse_on_scale_in=True, pool_state="Hibernated"
    )
    group = aws.group(*HOOKS, size=1, warm_pool=pool)
    (instance,) = group.instances()
    _complete(aws, "launch", instance, LAUNCHING)
    node = aws.nodes.node_for_instance(instance)

    # When the group scales in to none, and the instance's move into the pool is completed
    group.set_desired(0)
    _complete(aws, "drain", instance, TERMINATING)

    # Then it waits hibernated: stopped to EC2 (which tells of the stop), its node NotReady
    assert group.pool_instances() == {instance: "Warmed:Hibernated"}
    assert _ec2_state(aws, instance) == "stopped"
    assert _state_changes(aws, instance) == ["stopping", "stopped"]
    assert node in aws.nodes.stopped

    # When the group scales out again, it is started and comes back through the launch hook
    group.set_desired(1)
    assert group.instances() == {instance: "Pending:Wait"}
    assert _ec2_state(aws, instance) == "running"
    assert node not in aws.nodes.stopped


def test_a_scale_out_takes_the_pools_running_instances_first(aws: Emulation) -> None:
    # Given a group of none with a stopped instance in its pool, then the pool made running and one larger:
    # the older instance stays stopped, the new one waits running
    group = aws.group(*HOOKS, warm_pool=ONE_WARMED)
    stopped = _warmed(aws, group)
    group.put_warm_pool(WarmPoolSpec(min_size=2, max_group_prepared_capacity=0, pool_state="Running"))
    (running,) = [i for i in group.pool_instances() if i != stopped]
    _complete(aws, "launch", running, LAUNCHING)
    assert group.pool_instances() == {stopped: "Warmed:Stopped", running: "Warmed:Running"}

    # When the group scales out by one
    group.set_desired(1)

    # Then the running instance leaves the pool, though the stopped one is older
    assert group.instances() == {running: "Pending:Wait"}
    assert group.pool_instances()[stopped] == "Warmed:Stopped"


def test_describe_warm_pool_answers_in_pages_of_max_records(aws: Emulation) -> None:
    # Given a group of none with a warm pool of three
    group = aws.group(*HOOKS, warm_pool=WarmPoolSpec(min_size=3, max_group_prepared_capacity=0))
    expected = set(group.pool_instances())
    assert len(expected) == 3

    # When DescribeWarmPool is asked for two at a time
    first: Any = aws.autoscaling.describe_warm_pool(AutoScalingGroupName="workers", MaxRecords=2)
    second: Any = aws.autoscaling.describe_warm_pool(
        AutoScalingGroupName="workers", MaxRecords=2, NextToken=first["NextToken"]
    )

    # Then it answers two, then the last one without a NextToken, each page with the pool's configuration
    assert len(first["Instances"]) == 2
    assert len(second["Instances"]) == 1
    assert "NextToken" not in second
    assert {i["InstanceId"] for i in [*first["Instances"], *second["Instances"]]} == expected
    assert second["WarmPoolConfiguration"]["MinSize"] == 3
    # and boto3's paginator (nodecycle's) gets them all
    paginator = aws.autoscaling.get_paginator("describe_warm_pool")
    paged = [
        i["InstanceId"]
        for page in paginator.paginate(AutoScalingGroupName="workers", PaginationConfig={"PageSize": 1})
        for i in page["Instances"]
    ]
    assert sorted(paged) == sorted(expected)


def test_describe_warm_pool_refuses_more_than_50_records_and_a_token_it_did_not_give(aws: Emulation) -> None:
    # Given a group with a warm pool
    aws.group(*HOOKS, warm_pool=ONE_WARMED)

    # When DescribeWarmPool is asked for 51 records, or with a token of its own making, it is refused
    for request in ({"MaxRecords": 51}, {"NextToken": "not-a-token"}):
        with pytest.raises(ClientError) as refused:
            aws.autoscaling.describe_warm_pool(AutoScalingGroupName="workers", **request)
        assert refused.value.response["Error"]["Code"] == "ValidationError"
