"""Teach moto lifecycle hooks (and EKS access entries), once per process, before any request is served.

Patches classes, not backends, so it works for every account/region, under `mock_aws` and in server mode,
and survives moto's resets (a reset backend gets a fresh emulator through `emulator_for`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from moto.autoscaling.exceptions import ValidationError
from moto.autoscaling.models import (
    AutoScalingBackend,
    FakeAutoScalingGroup,
    InstanceState,
    autoscaling_backends,
)
from moto.autoscaling.responses import AutoScalingResponse
from moto.core.responses import ActionResult
from moto.ec2.responses.instances import InstanceResponse

from nodecycle_sandbox.aws import (
    api,
    autoscaling_names,
    dynamodb_expressions,
    dynamodb_index_lag,
    dynamodb_items,
    dynamodb_numbers,
    dynamodb_sizes,
    dynamodb_transactions,
    ec2_addresses,
    ec2_addresses_managed,
    ec2_consistency,
    ec2_filters,
    ec2_instances,
    ec2_tags,
    eks_access,
    events_schedules,
    events_sources,
    events_targets,
    lambda_invoke,
    lambda_mappings,
    lambda_vpc,
    moto_dispatch,
    sqs_attributes,
    sqs_mapping_polls,
    sqs_move_tasks,
    sqs_receipts,
    sqs_timing,
)
from nodecycle_sandbox.aws.lifecycle import active_instances, emulator_for
from nodecycle_sandbox.aws.warm_pool import group_instances
from nodecycle_sandbox.iam import enforce

_MARKER = "_nodecycle_sandbox_installed"


def install() -> None:
    """Idempotent: a second call changes nothing."""
    if getattr(AutoScalingResponse, _MARKER, False):
        return
    for operation in api.OPERATIONS:
        setattr(AutoScalingResponse, operation.__name__, operation)
    _patch_group()
    _patch_backend()
    _patch_stop_and_start()
    autoscaling_names.install()  # at most 50 group names a DescribeAutoScalingGroups call (100 with MaxRecords)
    moto_dispatch.install()  # moto's lookups of a request's backend and action, once, not per request
    sqs_timing.install()
    sqs_mapping_polls.install()  # a mapping's long polls gated by its state in Lambda; ended by its runner
    sqs_attributes.install()  # queue attributes within SQS's ranges
    sqs_move_tasks.install()  # the dead-letter queues' redrive (StartMessageMoveTask)
    sqs_receipts.install()  # a delete by a receipt handle older than the latest deletes nothing
    dynamodb_items.install()  # answers of lifecycle records without moto's per-attribute walk
    dynamodb_index_lag.install()  # global secondary indexes that lag their table
    dynamodb_numbers.install()  # numbers kept as DynamoDB keeps them: no leading or trailing zeroes
    dynamodb_transactions.install()  # one write at a time; a cancelled transaction undoes only its own
    dynamodb_expressions.install()  # a placeholder defined and not used refused, as DynamoDB does
    dynamodb_sizes.install()  # an item's lists and maps counted with their overhead against the size limit
    ec2_addresses.install()
    ec2_addresses_managed.install()  # an address on another service's interface (a NAT gateway's) is its own
    ec2_filters.install()  # at most 200 filter values a call, of at most 255 characters
    ec2_instances.install()  # terminated instances forgotten after about an hour
    ec2_tags.install()
    ec2_consistency.install()  # reads that lag the writes, when a test arms it
    eks_access.install()
    events_sources.install()  # PutEvents refuses the aws.* sources of AWS's own events
    events_schedules.install()  # PutRule refuses a schedule expression EventBridge refuses
    events_targets.install()  # PutTargets refuses a RetryPolicy beyond EventBridge's ranges
    lambda_mappings.install()  # SQS mappings run by the runner only, never by moto
    lambda_vpc.install()  # a VpcConfig's subnets and security groups given together
    lambda_invoke.install()  # an Event invocation of a stack's function run by the runner
    enforce.install()  # each function's calls against its role (nodecycle_sandbox.iam)
    setattr(AutoScalingResponse, _MARKER, True)


def _patch_group() -> None:
    original_set_desired_capacity = FakeAutoScalingGroup.set_desired_capacity

    def group_active_instances(self: FakeAutoScalingGroup) -> list[InstanceState]:
        return active_instances(self)

    def replace_autoscaling_group_instances(
        self: FakeAutoScalingGroup, count_needed: int, propagated_tags: dict[str, str]
    ) -> None:
        # moto launches the whole count into one random zone, InService at once; launch through the hooks.
        emulator_for(self.autoscaling_backend).launch_instances(self, count_needed)

    def set_desired_capacity(self: FakeAutoScalingGroup, new_capacity: int | None) -> None:
        emulator = emulator_for(self.autoscaling_backend)
        with emulator.lock:
            desired = self.min_size if new_capacity is None else new_capacity
            excess = len(active_instances(self)) - (desired or 0)
            if excess <= 0:
                original_set_desired_capacity(self, new_capacity)
            else:
                # moto would drop the excess instances at once; scale in through the terminate hooks.
                self.desired_capacity = desired
                emulator.scale_in(self, excess)
                if self.name in self.autoscaling_backend.autoscaling_groups:
                    self.autoscaling_backend.update_attached_elbs(self.name)
            # the warm pool's size follows the desired capacity
            emulator.pool.maintain(self)

    FakeAutoScalingGroup.active_instances = group_active_instances  # type: ignore[method-assign]
    # DescribeAutoScalingGroups' Instances: AWS lists a warm pool's instances in DescribeWarmPool alone.
    FakeAutoScalingGroup.instances = property(group_instances)  # type: ignore[assignment, method-assign]
    FakeAutoScalingGroup.replace_autoscaling_group_instances = replace_autoscaling_group_instances  # type: ignore[method-assign]
    FakeAutoScalingGroup.set_desired_capacity = set_desired_capacity  # type: ignore[method-assign]


def _patch_backend() -> None:
    original_notify = AutoScalingBackend.notify_terminate_instances
    original_delete = AutoScalingBackend.delete_auto_scaling_group
    original_describe_hooks = AutoScalingBackend.describe_lifecycle_hooks

    def terminate_instance(self: AutoScalingBackend, instance_id: str, should_decrement: bool) -> Any:
        return emulator_for(self).terminate_instance(instance_id, should_decrement)

    def notify_terminate_instances(self: AutoScalingBackend, instance_ids: list[str]) -> None:
        # moto calls this for TerminateInstances only: whoever called it, the hooks had no say.
        emulator = emulator_for(self)
        emulator.forget_instances(instance_ids)
        original_notify(self, instance_ids)
        emulator.disruptions.state_changed(instance_ids, ("shutting-down", "terminated"))

    def delete_auto_scaling_group(self: AutoScalingBackend, group_name: str) -> None:
        group = self.autoscaling_groups.get(group_name)
        if group is not None:
            emulator_for(self).delete_group(group)
        original_delete(self, group_name)

    def delete_lifecycle_hook(self: AutoScalingBackend, as_name: str, name: str) -> None:
        emulator_for(self).delete_hook(as_name, name)

    def describe_lifecycle_hooks(
        self: AutoScalingBackend, as_name: str, lifecycle_hook_names: list[str] | None = None
    ) -> Any:
        # Auto Scaling answers a ValidationError ("... not found") for a group it does not know, a deleted one
        # included (a caller reads that answer as "gone"); moto answered an empty list.
        if as_name not in self.autoscaling_groups:
            raise ValidationError(f"AutoScalingGroup name not found - AutoScalingGroup '{as_name}' not found")
        return original_describe_hooks(self, as_name, lifecycle_hook_names)

    patches: dict[str, Callable[..., Any]] = {
        "terminate_instance": terminate_instance,
        "describe_lifecycle_hooks": describe_lifecycle_hooks,
        "delete_lifecycle_hook": delete_lifecycle_hook,
        "notify_terminate_instances": notify_terminate_instances,
        "delete_auto_scaling_group": delete_auto_scaling_group,
    }
    for name, function in patches.items():
        setattr(AutoScalingBackend, name, function)


def _patch_stop_and_start() -> None:
    original_stop = InstanceResponse.stop_instances

    def stop_instances(self: InstanceResponse) -> ActionResult:
        """StopInstances, and EC2's state-change notifications for it (the hooks are not consulted)."""
        result = original_stop(self)
        emulator = emulator_for(autoscaling_backends[self.current_account][self.region])
        emulator.disruptions.state_changed(self._get_param("InstanceIds", []), ("stopping", "stopped"))
        return result

    InstanceResponse.stop_instances = stop_instances  # type: ignore[method-assign]

    original_start = InstanceResponse.start_instances

    def start_instances(self: InstanceResponse) -> ActionResult:
        """StartInstances, and its instances' nodes back once they have booted (LifecycleEmulator.boot_seconds: the
        node stays as the stop left it meanwhile, Ready for the node monitor's grace, then NotReady), their kubelets
        posting the new boot's id. (State changes not emulated.)"""
        result = original_start(self)
        emulator = emulator_for(autoscaling_backends[self.current_account][self.region])
        with emulator.lock:
            for instance_id in self._get_param("InstanceIds", []):
                emulator.instance_started(instance_id, boot=emulator.boot_seconds)
        return result

    InstanceResponse.start_instances = start_instances  # type: ignore[method-assign]
