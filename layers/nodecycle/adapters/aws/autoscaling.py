"""Auto Scaling: completing and heartbeating lifecycle actions, and reading hooks and group tags."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from nodecycle.adapters.aws.clients import LazyClient, error_code, transient_errors
from nodecycle.domain.model import ActionRef, Transition
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.lifecycle import Hook

if TYPE_CHECKING:
    from mypy_boto3_autoscaling import AutoScalingClient

log = logging.getLogger(__name__)


class AutoscalingActions:
    def __init__(self, autoscaling: AutoScalingClient | None = None) -> None:
        self._asg: LazyClient[AutoScalingClient] = LazyClient("autoscaling", autoscaling)

    def complete(self, action: ActionRef, result: ActionResult) -> bool:
        try:
            with transient_errors("completing a lifecycle action"):
                self._asg().complete_lifecycle_action(
                    AutoScalingGroupName=action.group,
                    LifecycleHookName=action.hook,
                    InstanceId=action.instance_id,
                    LifecycleActionToken=action.token,
                    LifecycleActionResult=result.value,
                )
        except ClientError as error:
            return self._settled(action, error)
        return True

    def heartbeat(self, action: ActionRef) -> bool:
        try:
            with transient_errors("recording a lifecycle heartbeat"):
                self._asg().record_lifecycle_action_heartbeat(
                    AutoScalingGroupName=action.group,
                    LifecycleHookName=action.hook,
                    InstanceId=action.instance_id,
                    LifecycleActionToken=action.token,
                )
        except ClientError as error:
            return self._settled(action, error)
        return True

    def _settled(self, action: ActionRef, error: ClientError) -> bool:
        """A ValidationError naming our own action means Auto Scaling no longer has it active.

        AWS answers "No active Lifecycle Action found" for an action completed before (by a delivery that died
        before recording it), timed out, or gone with its group; the instance's state cannot tell, since
        another hook may keep it waiting. Every other parameter of these calls comes from the action itself.
        """
        if error_code(error) != "ValidationError":
            raise error
        log.warning(
            "Auto Scaling has no active lifecycle action for %s any more: %s",
            action.instance_id,
            error.response.get("Error", {}).get("Message", ""),
        )
        return False

    def hook(self, group: str, name: str) -> Hook | None:
        try:
            with transient_errors("reading a lifecycle hook"):
                found = self._asg().describe_lifecycle_hooks(
                    AutoScalingGroupName=group, LifecycleHookNames=[name]
                )
        except ClientError as error:
            # Auto Scaling answers a ValidationError for a group it does not know: one deleted since it sent
            # the action (ForceDelete ends the actions with it), or a name no group has. Its hook is as gone as
            # a deleted hook's; asking again would fail the same way until the dead-letter queue.
            if error_code(error) != "ValidationError":
                raise
            log.warning(
                "Auto Scaling does not know group %s: %s",
                group,
                error.response.get("Error", {}).get("Message", ""),
            )
            return None
        hooks = found.get("LifecycleHooks", [])
        if not hooks:
            return None
        return Hook(
            transition=Transition(hooks[0]["LifecycleTransition"]),
            heartbeat_timeout=int(hooks[0].get("HeartbeatTimeout", 3600)),
        )

    def group_tags(self, group: str) -> dict[str, str] | None:
        with transient_errors("reading a group's tags"):
            found = self._asg().describe_auto_scaling_groups(AutoScalingGroupNames=[group])
        groups = found.get("AutoScalingGroups", [])
        if not groups:
            return None
        return {tag["Key"]: tag.get("Value", "") for tag in groups[0].get("Tags", [])}

    def lifecycle_state(self, instance_id: str) -> str | None:
        with transient_errors("reading an instance's lifecycle state"):
            found = self._asg().describe_auto_scaling_instances(InstanceIds=[instance_id])
        instances = found.get("AutoScalingInstances", [])
        return str(instances[0]["LifecycleState"]) if instances else None
