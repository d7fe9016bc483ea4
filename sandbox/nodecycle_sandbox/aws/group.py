"""`sandbox.asg`: the Auto Scaling group of the sandbox, driven through the real Auto Scaling API."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from nodecycle_sandbox.aws.control import AwsControls
from nodecycle_sandbox.aws.records import LAUNCHING, TERMINATING, ActionRecord, RefreshTimeline

if TYPE_CHECKING:
    from mypy_boto3_autoscaling import AutoScalingClient
    from mypy_boto3_ec2 import EC2Client

# An image id moto knows; the sandbox never boots it.
SANDBOX_AMI = "ami-12c6146b"


@dataclass(frozen=True)
class HookSpec:
    name: str
    transition: str
    heartbeat_timeout: int = 300
    default_result: str = "ABANDON"
    # "eventbridge": AWS sends the action to EventBridge only; "sqs": also to the given queue ARN.
    target_arn: str | None = None
    role_arn: str | None = None
    metadata: str | None = None


def default_hooks(heartbeat_timeout: int = 300) -> tuple[HookSpec, ...]:
    return (
        HookSpec("nodecycle-launch", LAUNCHING, heartbeat_timeout, "ABANDON"),
        HookSpec("nodecycle-terminate", TERMINATING, heartbeat_timeout, "CONTINUE"),
    )


@dataclass(frozen=True)
class WarmPoolSpec:
    """A warm pool (PutWarmPool): its instances wait in `pool_state` (Stopped, Running or Hibernated). The pool
    keeps max(min_size, max_group_prepared_capacity - desired) instances; unset, AWS counts from the group's max
    size."""

    min_size: int = 1
    max_group_prepared_capacity: int | None = None
    # InstanceReusePolicy.ReuseOnScaleIn: a scale in sends the instance back to the pool, in its pool state
    reuse_on_scale_in: bool = False
    pool_state: str = "Stopped"


@dataclass(frozen=True)
class GroupSpec:
    name: str = "nodecycle-workers"
    zones: tuple[str, ...] = ("a", "b", "c")  # suffixes of the region, or full zone names
    size: int = 3
    max_size: int = 100
    instance_type: str = "m5.large"
    hooks: tuple[HookSpec, ...] = field(default_factory=default_hooks)
    tags: dict[str, str] = field(default_factory=dict)
    # Spot capacity (a MixedInstancesPolicy): None, all On-Demand; else the On-Demand share above the base.
    on_demand_percentage: int | None = None
    on_demand_base: int = 0
    # CapacityRebalance: a rebalance recommendation of a Spot instance makes Auto Scaling replace it (a new
    # instance launched, then the old one terminated through the terminate hooks)
    capacity_rebalance: bool = False
    # None: no warm pool (the group launches every instance from EC2, as without one)
    warm_pool: WarmPoolSpec | None = None


class AutoScalingGroup:
    def __init__(
        self, *, autoscaling: AutoScalingClient, ec2: EC2Client, control: AwsControls, region: str, name: str
    ) -> None:
        self.autoscaling = autoscaling
        self.ec2 = ec2
        self.control = control
        self.region = region
        self.name = name

    def create(self, spec: GroupSpec) -> None:
        """Create the group empty, put its hooks, then scale to size, so every instance launches through
        the launch hooks (as a group created with `LifecycleHookSpecificationList` would); then its warm pool."""
        template = f"{spec.name}-template"
        data: Any = {"ImageId": SANDBOX_AMI, "InstanceType": spec.instance_type}
        self.ec2.create_launch_template(LaunchTemplateName=template, LaunchTemplateData=data)
        capacity: dict[str, Any] = {"LaunchTemplate": {"LaunchTemplateName": template}}
        if spec.on_demand_percentage is not None:
            capacity = {
                "MixedInstancesPolicy": {
                    "LaunchTemplate": {
                        "LaunchTemplateSpecification": {"LaunchTemplateName": template, "Version": "$Latest"}
                    },
                    "InstancesDistribution": {
                        "OnDemandBaseCapacity": spec.on_demand_base,
                        "OnDemandPercentageAboveBaseCapacity": spec.on_demand_percentage,
                        "SpotAllocationStrategy": "price-capacity-optimized",
                    },
                }
            }
        self.autoscaling.create_auto_scaling_group(
            AutoScalingGroupName=spec.name,
            **capacity,
            MinSize=0,
            MaxSize=spec.max_size,
            DesiredCapacity=0,
            CapacityRebalance=spec.capacity_rebalance,
            AvailabilityZones=[z if z.startswith(self.region) else f"{self.region}{z}" for z in spec.zones],
            Tags=[
                {"Key": k, "Value": v, "PropagateAtLaunch": True, "ResourceId": spec.name}
                for k, v in spec.tags.items()
            ],
        )
        for hook in spec.hooks:
            self.put_hook(hook)
        if spec.size:
            self.set_desired(spec.size)
        # (after: the group's instances launch into it, the pool is sized by its desired capacity)
        if spec.warm_pool is not None:
            self.put_warm_pool(spec.warm_pool)

    def put_hook(self, hook: HookSpec) -> None:
        request: dict[str, Any] = {
            "AutoScalingGroupName": self.name,
            "LifecycleHookName": hook.name,
            "LifecycleTransition": hook.transition,
            "HeartbeatTimeout": hook.heartbeat_timeout,
            "DefaultResult": hook.default_result,
        }
        if hook.target_arn:
            request["NotificationTargetARN"] = hook.target_arn
        if hook.role_arn:
            request["RoleARN"] = hook.role_arn
        if hook.metadata is not None:
            request["NotificationMetadata"] = hook.metadata
        self.autoscaling.put_lifecycle_hook(**request)

    def put_warm_pool(self, pool: WarmPoolSpec) -> None:
        request: dict[str, Any] = {
            "AutoScalingGroupName": self.name,
            "MinSize": pool.min_size,
            "PoolState": pool.pool_state,
            "InstanceReusePolicy": {"ReuseOnScaleIn": pool.reuse_on_scale_in},
        }
        if pool.max_group_prepared_capacity is not None:
            request["MaxGroupPreparedCapacity"] = pool.max_group_prepared_capacity
        self.autoscaling.put_warm_pool(**request)

    # -- scaling --------------------------------------------------------------------------------

    def set_desired(self, capacity: int) -> None:
        self.autoscaling.set_desired_capacity(AutoScalingGroupName=self.name, DesiredCapacity=capacity)

    def terminate(self, instance_id: str, *, decrement: bool = False) -> None:
        self.autoscaling.terminate_instance_in_auto_scaling_group(
            InstanceId=instance_id, ShouldDecrementDesiredCapacity=decrement
        )

    def start_refresh(
        self, *, min_healthy_percentage: int = 90, instance_warmup: int = 0, strategy: str | None = None
    ) -> str:
        """``strategy``: StartInstanceRefresh's (Rolling when not given; ReplaceRootVolume replaces root volumes)."""
        named: dict[str, Any] = {} if strategy is None else {"Strategy": strategy}
        try:
            answer = self.autoscaling.start_instance_refresh(
                AutoScalingGroupName=self.name,
                Preferences={
                    "MinHealthyPercentage": min_healthy_percentage,
                    "InstanceWarmup": instance_warmup,
                },
                **named,
            )
        except ClientError as error:
            if error.response["Error"]["Code"] != "InstanceRefreshInProgress":
                raise
            # botocore sent the call again after an answer it did not get (a 500, a timeout) although the first
            # attempt started the refresh: that one is ours
            running = self.autoscaling.describe_instance_refreshes(AutoScalingGroupName=self.name)
            return next(
                r["InstanceRefreshId"] for r in running["InstanceRefreshes"] if r["Status"] == "InProgress"
            )
        return answer["InstanceRefreshId"]

    def refresh_status(self, refresh_id: str) -> str:
        answer = self.autoscaling.describe_instance_refreshes(
            AutoScalingGroupName=self.name, InstanceRefreshIds=[refresh_id]
        )
        return answer["InstanceRefreshes"][0]["Status"]

    def wait_refresh(self, refresh_id: str, timeout: float) -> RefreshTimeline:
        """Until the refresh is no longer InProgress: its timeline. Read from the emulation's record of it (the
        status DescribeInstanceRefreshes answers with), over the pipe: a poll (50 to 250 ms apart: wait_for) of a
        refresh's tens of seconds costs 0.25 ms of CPU in all, a DescribeInstanceRefreshes several ms in this process and the AWS
        process."""

        def over() -> RefreshTimeline | None:
            timeline = self.control.refresh_timeline(refresh_id=refresh_id)  # by keyword: it may cross a pipe
            return timeline if timeline.status != "InProgress" else None

        return wait_for(over, timeout, f"the instance refresh {refresh_id}")

    # -- disruptions without a hook ---------------------------------------------------------------

    def interrupt_spot(
        self, instance_id: str, *, warning_seconds: float = 120, hook_after: float = 2
    ) -> None:
        self.control.interrupt_spot(
            instance_id=instance_id, warning_seconds=warning_seconds, hook_after=hook_after
        )

    def recommend_rebalance(self, instance_id: str) -> None:
        self.control.recommend_rebalance(instance_id=instance_id)

    def schedule_maintenance(
        self,
        instance_ids: list[str],
        *,
        starts_in: float,
        code: str = "instance-retirement",
        deadline_in: float | None = None,
    ) -> None:
        self.control.schedule_maintenance(
            instance_ids=instance_ids, code=code, starts_in=starts_in, deadline_in=deadline_in
        )

    def reschedule_maintenance(self, instance_ids: list[str], *, starts_in: float) -> None:
        self.control.reschedule_maintenance(instance_ids=instance_ids, starts_in=starts_in)

    def end_maintenance(self, instance_ids: list[str], *, canceled: bool = False) -> None:
        self.control.end_maintenance(instance_ids=instance_ids, canceled=canceled)

    def spot_instances(self) -> list[str]:
        """The group's instances that are Spot, as DescribeInstances says."""
        ids = list(self.instances())
        if not ids:
            return []
        found = self.ec2.describe_instances(InstanceIds=ids)
        return [
            i["InstanceId"]
            for r in found["Reservations"]
            for i in r["Instances"]
            if i.get("InstanceLifecycle") == "spot"
        ]

    # -- looking --------------------------------------------------------------------------------

    def instances(self) -> dict[str, str]:
        """Instance id -> lifecycle state, for the instances the group has now."""
        group = self.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[self.name])
        return {i["InstanceId"]: i["LifecycleState"] for i in group["AutoScalingGroups"][0]["Instances"]}

    def pool_instances(self) -> dict[str, str]:
        """Instance id -> lifecycle state (Warmed:*), for the instances of the group's warm pool."""
        pool = self.autoscaling.describe_warm_pool(AutoScalingGroupName=self.name)
        return {i["InstanceId"]: i["LifecycleState"] for i in pool.get("Instances", [])}

    def in_state(self, state: str) -> list[str]:
        return [i for i, s in self.instances().items() if s == state]

    def actions(self, *, transition: str | None = None) -> list[ActionRecord]:
        return [
            a
            for a in self.control.actions()
            if a.group == self.name and (transition is None or a.transition == transition)
        ]

    def wait_in_service(self, count: int, timeout: float) -> list[str]:
        """Until ``count`` of the group's instances are InService, as DescribeAutoScalingGroups says: their ids.
        Each poll asks Auto Scaling only once the emulation's histories have ``count`` instances of the group that
        came into service at some time (every instance InService now did, so no poll that would have been met is
        skipped): a launch's seconds (a cold container, the readiness gate) are waited out on the records over
        the pipe (0.25 ms of CPU a poll in all), not on a DescribeAutoScalingGroups every 50 ms (4.4 ms of CPU a
        poll, in this process and in the AWS process)."""
        return wait_for(
            lambda: (
                self._ever_in_service() >= count and len(ids := self.in_state("InService")) >= count and ids
            ),
            timeout,
            f"{count} instances of {self.name} in service",
        )

    def _ever_in_service(self) -> int:
        """How many of the group's instances have come into service at some time, from the emulation's records."""
        return sum(
            1 for i in self.control.instances() if i.group == self.name and i.in_service_at is not None
        )


# The longest a wait sleeps between two polls once it has waited a while. A poll is rarely free: a lifecycle record
# is a GetItem through moto (a few ms of CPU here and in the AWS process), a node a GET of the API server; twenty a
# second through a wait of tens of seconds took CPU from the functions and kubelets the wait is for, on two cores.
POLL_CEILING = 0.25
# The share of the time waited so far that a wait sleeps between two polls (until POLL_CEILING): what it finds is
# late by a tenth of the wait at most, a few polls of `poll` first for what comes at once
POLL_BACKOFF = 0.1


def wait_for(
    predicate: Callable[[], Any], timeout: float, what: str = "condition", poll: float = 0.05
) -> Any:
    """Poll `predicate` until it is truthy; return its value or raise TimeoutError naming `what`. The polls are
    `poll` apart at first, then a tenth of the time waited so far (POLL_BACKOFF), a quarter of a second at most
    (POLL_CEILING; never less than `poll`)."""
    started = time.monotonic()
    deadline = started + timeout
    ceiling = max(poll, POLL_CEILING)
    while True:
        value = predicate()
        if value:
            return value
        now = time.monotonic()
        if now >= deadline:
            raise TimeoutError(f"{what}: not met within {timeout} s")
        time.sleep(min(ceiling, max(poll, POLL_BACKOFF * (now - started)), deadline - now))
