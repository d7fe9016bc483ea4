"""The Auto Scaling API operations the sandbox adds to (or replaces in) moto's `AutoScalingResponse`.

moto dispatches `Action=CompleteLifecycleAction` to the response method `complete_lifecycle_action`, in
server mode and under `mock_aws` alike, so adding methods to the class is all it takes.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from moto.core.responses import ActionResult, EmptyResult

from nodecycle_sandbox.aws.activities import ActivityQuery, describe_activities
from nodecycle_sandbox.aws.lifecycle import emulator_for
from nodecycle_sandbox.aws.refresh import DEFAULT_MIN_HEALTHY_PERCENTAGE, ROLLING
from nodecycle_sandbox.aws.warm_pool import check_pool_state, pool_instances, pool_page

if TYPE_CHECKING:
    from moto.autoscaling.responses import AutoScalingResponse


def complete_lifecycle_action(self: AutoScalingResponse) -> ActionResult:
    emulator_for(self.autoscaling_backend).complete(
        group=self._get_param("AutoScalingGroupName"),
        hook=self._get_param("LifecycleHookName"),
        result=self._get_param("LifecycleActionResult"),
        token=self._get_param("LifecycleActionToken"),
        instance_id=self._get_param("InstanceId"),
        caller=self.access_key,
    )
    return EmptyResult()


def record_lifecycle_action_heartbeat(self: AutoScalingResponse) -> ActionResult:
    emulator_for(self.autoscaling_backend).heartbeat(
        group=self._get_param("AutoScalingGroupName"),
        hook=self._get_param("LifecycleHookName"),
        token=self._get_param("LifecycleActionToken"),
        instance_id=self._get_param("InstanceId"),
        caller=self.access_key,
    )
    return EmptyResult()


def put_lifecycle_hook(self: AutoScalingResponse) -> ActionResult:
    # moto's own version drops the notification target, metadata and role.
    emulator_for(self.autoscaling_backend).put_hook(
        group=self._get_param("AutoScalingGroupName"),
        name=self._get_param("LifecycleHookName"),
        transition=self._get_param("LifecycleTransition"),
        heartbeat_timeout=self._get_int_param("HeartbeatTimeout"),
        default_result=self._get_param("DefaultResult"),
        target_arn=self._get_param("NotificationTargetARN"),
        metadata=self._get_param("NotificationMetadata"),
        role_arn=self._get_param("RoleARN"),
    )
    return EmptyResult()


def start_instance_refresh(self: AutoScalingResponse) -> ActionResult:
    preferences = self._get_param("Preferences") or {}
    refresh = emulator_for(self.autoscaling_backend).start_refresh(
        self._get_param("AutoScalingGroupName"),
        min_healthy_percentage=int(preferences.get("MinHealthyPercentage", DEFAULT_MIN_HEALTHY_PERCENTAGE)),
        # AWS falls back to the group's warm-up or grace period (often minutes); the sandbox to none.
        instance_warmup=float(preferences.get("InstanceWarmup", 0)),
        strategy=self._get_param("Strategy") or ROLLING,
    )
    return ActionResult({"InstanceRefreshId": refresh.refresh_id})


def describe_instance_refreshes(self: AutoScalingResponse) -> ActionResult:
    emulator = emulator_for(self.autoscaling_backend)
    group = self._get_param("AutoScalingGroupName")
    wanted = self._get_param("InstanceRefreshIds") or []
    with emulator.lock:
        refreshes = [
            r.describe(emulator.instances)
            for r in reversed(list(emulator.refreshes.values()))
            if r.group == group and (not wanted or r.refresh_id in wanted)
        ]
    return ActionResult({"InstanceRefreshes": refreshes})


def cancel_instance_refresh(self: AutoScalingResponse) -> ActionResult:
    refresh_id = emulator_for(self.autoscaling_backend).cancel_refresh(
        self._get_param("AutoScalingGroupName")
    )
    return ActionResult({"InstanceRefreshId": refresh_id})


def put_warm_pool(self: AutoScalingResponse) -> ActionResult:
    """PutWarmPool, then the pool filled (moto only stores the configuration)."""
    params = self._get_params()
    check_pool_state(params.get("PoolState"))
    emulator = emulator_for(self.autoscaling_backend)
    with emulator.lock:
        name = self._get_param("AutoScalingGroupName")
        group = emulator.group(name)
        prepared, minimum = params.get("MaxGroupPreparedCapacity"), params.get("MinSize")
        group.put_warm_pool(
            max_group_prepared_capacity=None if prepared is None else int(prepared),
            min_size=None if minimum is None else int(minimum),
            pool_state=params.get("PoolState"),
            instance_reuse_policy=params.get("InstanceReusePolicy"),
        )
        emulator.pool.maintain(group)
    return EmptyResult()


def describe_warm_pool(self: AutoScalingResponse) -> ActionResult:
    """DescribeWarmPool with the pool's instances and their states (moto lists none), in pages of MaxRecords
    (at most 50) with a NextToken, as AWS answers."""
    emulator = emulator_for(self.autoscaling_backend)
    with emulator.lock:
        group = emulator.group(self._get_param("AutoScalingGroupName"))
        page, next_token = pool_page(
            pool_instances(group) if group.warm_pool else [],
            self._get_param("MaxRecords"),
            self._get_param("NextToken"),
        )
        result: dict[str, object] = {"Instances": page}
        if next_token is not None:
            result["NextToken"] = next_token
        if group.warm_pool is not None:
            result["WarmPoolConfiguration"] = group.warm_pool
        return ActionResult(result)


def describe_scaling_activities(self: AutoScalingResponse) -> ActionResult:
    """DescribeScalingActivities over the emulated groups' activities (moto answers an empty list): see
    activities.py for what AWS documents of it."""
    emulator = emulator_for(self.autoscaling_backend)
    params = self._get_params()
    query = ActivityQuery(
        group=params.get("AutoScalingGroupName"),
        activity_ids=list(params.get("ActivityIds") or []),
        include_deleted=str(params.get("IncludeDeletedGroups", "false")).lower() == "true",
        max_records=params.get("MaxRecords"),
        next_token=params.get("NextToken"),
        filters=list(params.get("Filters") or []),
    )
    with emulator.lock:
        groups = self.autoscaling_backend.autoscaling_groups

        def state_of(instance_id: str) -> str | None:
            found = emulator.find_state(instance_id)
            return None if found is None else str(found[1].lifecycle_state)

        page = describe_activities(
            list(emulator.activities), query, time.time(), state_of, lambda name: name in groups
        )
    return ActionResult(page)


OPERATIONS = (
    complete_lifecycle_action,
    record_lifecycle_action_heartbeat,
    put_lifecycle_hook,
    start_instance_refresh,
    describe_instance_refreshes,
    cancel_instance_refresh,
    put_warm_pool,
    describe_warm_pool,
    describe_scaling_activities,
)
