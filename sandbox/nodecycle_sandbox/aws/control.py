"""The sandbox's own handle on the emulated AWS: knobs and records that no AWS API has.

`AwsControl` acts on the moto backends of the process it lives in. `AwsControls` is the surface shared
with `RemoteAwsControl` (the same calls, made over a pipe into the AWS process).
"""

from __future__ import annotations

import copy
import time
from typing import Any, Protocol

from moto.autoscaling.models import AutoScalingBackend, autoscaling_backends
from moto.dynamodb.models import dynamodb_backends

from nodecycle_sandbox.aws import (
    dynamodb_index_lag,
    dynamodb_ttl,
    ec2_addresses,
    ec2_consistency,
    ec2_instances,
    ec2_throttling,
    eks,
    lambda_invoke,
)
from nodecycle_sandbox.aws import faults as aws_faults
from nodecycle_sandbox.aws.disruptions import SPOT_HOOK_AFTER_SECONDS, SPOT_WARNING_SECONDS
from nodecycle_sandbox.aws.ec2_throttling import Throttled
from nodecycle_sandbox.aws.eks_access import API_AND_CONFIG_MAP
from nodecycle_sandbox.aws.lifecycle import EventSink, LifecycleEmulator, emulator_for
from nodecycle_sandbox.aws.nodes import NodeRegistry
from nodecycle_sandbox.aws.records import ActionRecord, InstanceHistory, Notification, RefreshTimeline
from nodecycle_sandbox.faults import Fault, Firing
from nodecycle_sandbox.iam.identities import IDENTITIES, JournalEntry

SANDBOX_ACCOUNT = "123456789012"


class AwsControls(Protocol):
    def configure(
        self,
        *,
        global_timeout_factor: float | None = None,
        global_timeout_cap: float | None = None,
        eventbridge_for_sqs_hooks: bool | None = None,
        terminated_retention_seconds: float | None = None,
        address_quota: int | None = None,
        token_checked_against_instance: bool | None = None,
        token_checked_against_group: bool | None = None,
        notifications_tell_origin: bool | None = None,
        root_volume_boot_seconds: float | None = None,
        root_volume_boot_seconds_of: dict[str, float] | None = None,
        boot_seconds: float | None = None,
        instance_tags_after_seconds: float | None = None,
    ) -> None: ...

    def plan_nodes(
        self,
        *,
        ready_after: float | None = None,
        join_after: float | None = None,
        remove_after: float | None = None,
        never_ready: int = 0,
        never_join: int = 0,
        labels: dict[str, str] | None = None,
    ) -> None: ...

    def point_cluster(
        self, *, name: str, endpoint: str, ca_pem: str, authentication_mode: str = API_AND_CONFIG_MAP
    ) -> None: ...

    def interrupt_spot(
        self,
        *,
        instance_id: str,
        warning_seconds: float = SPOT_WARNING_SECONDS,
        hook_after: float = SPOT_HOOK_AFTER_SECONDS,
    ) -> None: ...

    def recommend_rebalance(self, *, instance_id: str) -> None: ...

    def schedule_maintenance(
        self,
        *,
        instance_ids: list[str],
        code: str = "instance-retirement",
        starts_in: float,
        duration: float = 7200,
        deadline_in: float | None = None,
    ) -> None: ...

    def reschedule_maintenance(self, *, instance_ids: list[str], starts_in: float) -> None: ...

    def end_maintenance(self, *, instance_ids: list[str], canceled: bool = False) -> None: ...

    def actions(self) -> list[ActionRecord]: ...

    def instances(self) -> list[InstanceHistory]: ...

    def refresh_timeline(self, refresh_id: str) -> RefreshTimeline: ...

    def notifications(self) -> list[Notification]: ...

    def register_identities(self, *, roles: list[dict[str, Any]], keys: list[dict[str, str]]) -> None: ...

    def authorizations(self) -> list[JournalEntry]: ...

    def arm_faults(self, *, faults: list[Fault], seed: int, callers: list[str] | None) -> None: ...

    def disarm_faults(self) -> None: ...

    def fault_firings(self) -> list[Firing]: ...

    def lag_ec2(self, *, seconds: float, callers: list[str] | None) -> list[str]: ...

    def lock_address(self, *, allocation_id: str, locked: bool = True) -> None: ...

    def throttle_ec2(self, *, on: bool, unmetered: list[str] | None = None) -> None: ...

    def ec2_throttled(self) -> list[Throttled]: ...

    def expire_ttl(self, *, at: float | None = None) -> list[str]: ...


class AwsControl:
    """Knobs and records of the emulation in one account and region of this process's moto."""

    def __init__(self, *, region: str, account: str = SANDBOX_ACCOUNT) -> None:
        self.region = region
        self.account = account

    @property
    def backend(self) -> AutoScalingBackend:
        return autoscaling_backends[self.account][self.region]

    @property
    def emulator(self) -> LifecycleEmulator:
        return emulator_for(self.backend)

    def connect(self, *, events: EventSink | None, nodes: NodeRegistry | None) -> None:
        """Where lifecycle events go and which cluster instances join (in-process objects only). An ``events``
        that runs functions (``invoke`` and ``invoke_sync``: the sandbox) also takes the Event and RequestResponse
        invocations of its functions."""
        self.emulator.events = events
        self.emulator.nodes = nodes
        lambda_invoke.connect(getattr(events, "invoke", None), getattr(events, "invoke_sync", None))

    def configure(
        self,
        *,
        global_timeout_factor: float | None = None,
        global_timeout_cap: float | None = None,
        eventbridge_for_sqs_hooks: bool | None = None,
        terminated_retention_seconds: float | None = None,
        address_quota: int | None = None,
        token_checked_against_instance: bool | None = None,
        token_checked_against_group: bool | None = None,
        notifications_tell_origin: bool | None = None,
        root_volume_boot_seconds: float | None = None,
        root_volume_boot_seconds_of: dict[str, float] | None = None,
        boot_seconds: float | None = None,
        instance_tags_after_seconds: float | None = None,
    ) -> None:
        """Change the global-timeout rule (for hooks put from now on), where SQS-hook events go, how long
        EC2 lists a terminated instance (about an hour on AWS), and how many Elastic IPs the account may
        hold (5 by default on AWS; no limit in the sandbox until set), and whether a lifecycle call's token
        must be of the instance named with it (see LifecycleEmulator.token_checked_against_instance), and of the
        group named with it (token_checked_against_group), and whether a hook's queue or topic notifications carry
        Origin and Destination (LifecycleEmulator.notifications_tell_origin), and how long after its root volume is
        replaced an instance's kubelet runs again (LifecycleEmulator.root_volume_boot_seconds; for the instances named in
        root_volume_boot_seconds_of, their own, in place of it), and how long an
        instance EC2 reboots (a scheduled reboot) or starts keeps it away (LifecycleEmulator.boot_seconds), and how
        long after its launch an instance shows Auto Scaling's tags (LifecycleEmulator.instance_tags_after_seconds)."""
        emulator = self.emulator
        with emulator.lock:
            if address_quota is not None:
                ec2_addresses.set_quota(self.backend.ec2_backend, address_quota)
            if terminated_retention_seconds is not None:
                ec2_instances.set_retention(self.backend.ec2_backend, terminated_retention_seconds)
            if global_timeout_factor is not None:
                emulator.timing.global_timeout_factor = global_timeout_factor
            if global_timeout_cap is not None:
                emulator.timing.global_timeout_cap = global_timeout_cap
            if eventbridge_for_sqs_hooks is not None:
                emulator.eventbridge_for_sqs_hooks = eventbridge_for_sqs_hooks
            if token_checked_against_instance is not None:
                emulator.token_checked_against_instance = token_checked_against_instance
            if token_checked_against_group is not None:
                emulator.token_checked_against_group = token_checked_against_group
            if notifications_tell_origin is not None:
                emulator.notifications_tell_origin = notifications_tell_origin
            if root_volume_boot_seconds is not None:
                emulator.root_volume_boot_seconds = root_volume_boot_seconds
            for instance_id, seconds in (root_volume_boot_seconds_of or {}).items():
                if seconds < 0:
                    raise ValueError(f"root volume boot of {instance_id} must not be negative, got {seconds}")
                emulator.root_volume_boot_seconds_of[instance_id] = seconds
            if boot_seconds is not None:
                emulator.boot_seconds = boot_seconds
            if instance_tags_after_seconds is not None:
                emulator.instance_tags_after_seconds = instance_tags_after_seconds

    def plan_nodes(
        self,
        *,
        ready_after: float | None = None,
        join_after: float | None = None,
        remove_after: float | None = None,
        never_ready: int = 0,
        never_join: int = 0,
        labels: dict[str, str] | None = None,
    ) -> None:
        """How the next launches join the cluster (see `NodePlan`)."""
        emulator = self.emulator
        with emulator.lock:
            plan = emulator.node_plan
            if ready_after is not None:
                plan.ready_after = ready_after
            if join_after is not None:
                plan.join_after = join_after
            if remove_after is not None:
                plan.remove_after = remove_after
            plan.never_ready += never_ready
            plan.never_join += never_join
            if labels is not None:
                plan.labels = dict(labels)

    def point_cluster(
        self, *, name: str, endpoint: str, ca_pem: str, authentication_mode: str = API_AND_CONFIG_MAP
    ) -> None:
        eks.point_cluster(
            account=self.account,
            region=self.region,
            name=name,
            endpoint=endpoint,
            ca_pem=ca_pem,
            authentication_mode=authentication_mode,
        )

    def interrupt_spot(
        self,
        *,
        instance_id: str,
        warning_seconds: float = SPOT_WARNING_SECONDS,
        hook_after: float = SPOT_HOOK_AFTER_SECONDS,
    ) -> None:
        """EC2 reclaims a Spot instance: its request marked for termination, the warning on the event bus,
        the group's terminate hooks ``hook_after`` seconds later, the instance gone ``warning_seconds`` after
        the warning (AWS: 120; tests compress it)."""
        self.emulator.disruptions.interrupt_spot(
            instance_id, warning_seconds=warning_seconds, hook_after=hook_after
        )

    def recommend_rebalance(self, *, instance_id: str) -> None:
        """EC2's rebalance recommendation for a Spot instance (an event, nothing more)."""
        self.emulator.disruptions.recommend_rebalance(instance_id)

    def schedule_maintenance(
        self,
        *,
        instance_ids: list[str],
        code: str = "instance-retirement",
        starts_in: float,
        duration: float = 7200,
        deadline_in: float | None = None,
    ) -> None:
        """A scheduled event (``code``, as DescribeInstanceStatus names it) starting ``starts_in`` seconds from
        now, on the instances' status and as an AWS Health event; ``deadline_in``: the latest start it may be moved
        to, in seconds from now (its NotBeforeDeadline); None: it has none and cannot be moved."""
        self.emulator.disruptions.schedule_maintenance(
            instance_ids, code=code, starts_in=starts_in, duration=duration, deadline_in=deadline_in
        )

    def reschedule_maintenance(self, *, instance_ids: list[str], starts_in: float) -> None:
        """The instances' first pending scheduled event moved to start ``starts_in`` seconds from now, as a
        customer's ModifyInstanceEventStartTime moves it: on the instances' status only, no AWS Health event."""
        self.emulator.disruptions.reschedule_maintenance(instance_ids, starts_in=starts_in)

    def end_maintenance(self, *, instance_ids: list[str], canceled: bool = False) -> None:
        """EC2 carries out the instances' first pending scheduled event (a reboot reboots the instance, its kubelet
        away for a while; system maintenance leaves it running; a stop or retirement stops it), or calls it off
        (``canceled``): it is listed ``[Completed]`` or ``[Canceled]`` from then on."""
        self.emulator.disruptions.end_maintenance(instance_ids, canceled=canceled)

    def actions(self) -> list[ActionRecord]:
        emulator = self.emulator
        with emulator.lock:
            return copy.deepcopy(list(emulator.actions.values()))

    def instances(self) -> list[InstanceHistory]:
        emulator = self.emulator
        with emulator.lock:
            return copy.deepcopy(list(emulator.instances.values()))

    def refresh_timeline(self, refresh_id: str) -> RefreshTimeline:
        emulator = self.emulator
        with emulator.lock:
            return emulator.refreshes[refresh_id].timeline(emulator.instances)

    def notifications(self) -> list[Notification]:
        emulator = self.emulator
        with emulator.lock:
            return list(emulator.notifications)

    def register_identities(self, *, roles: list[dict[str, Any]], keys: list[dict[str, str]]) -> None:
        """Roles and the access keys that act as them: their calls are evaluated against the roles'
        policies from now on (see ``nodecycle_sandbox.iam``)."""
        IDENTITIES.register(roles, keys)

    def authorizations(self) -> list[JournalEntry]:
        """Every authorization decided so far for a registered role, in order."""
        return IDENTITIES.journal()

    def arm_faults(self, *, faults: list[Fault], seed: int, callers: list[str] | None) -> None:
        """Inject ``faults`` into the AWS calls signed by ``callers`` (access key ids; None: anyone)."""
        aws_faults.FAULTS.arm_for(faults, seed, callers)
        dynamodb_index_lag.LAG.arm(faults, seed)  # (the index lags for every caller)

    def disarm_faults(self) -> None:
        aws_faults.FAULTS.disarm()
        dynamodb_index_lag.LAG.disarm()

    def fault_firings(self) -> list[Firing]:
        """Every fault injected since the plan was armed."""
        return [*aws_faults.FAULTS.firings(), *dynamodb_index_lag.LAG.firings()]

    def lag_ec2(self, *, seconds: float, callers: list[str] | None) -> list[str]:
        """EC2's reads by ``callers`` lag its writes by ``seconds`` from now on (0: no more), as
        ``ec2_consistency.py`` tells; what the lag armed before met ("<operation> <id>")."""
        met = list(ec2_consistency.LAG.lagged)
        ec2_consistency.LAG.arm(seconds, callers)
        return met

    def throttle_ec2(self, *, on: bool, unmetered: list[str] | None = None) -> None:
        """EC2's request throttling (``ec2_throttling.py``, on by default) on or off, the requests signed with
        ``unmetered`` keys left out of it; either way the buckets are full again and the refusals so far forgotten."""
        ec2_throttling.THROTTLING.reset(on=on, unmetered=unmetered or ())

    def ec2_throttled(self) -> list[Throttled]:
        """Every EC2 request refused for its account's rate since the server started (or the last toggle)."""
        return ec2_throttling.THROTTLING.throttled()

    def lock_address(self, *, allocation_id: str, locked: bool = True) -> None:
        """AWS locks the Elastic IP (``locked``: ReleaseAddress refused, ``InvalidAddress.Locked``) or AWS Support
        unlocks it, as ``ec2_addresses.py`` tells."""
        (ec2_addresses.lock if locked else ec2_addresses.unlock)(self.backend.ec2_backend, allocation_id)

    def expire_ttl(self, *, at: float | None = None) -> list[str]:
        """DynamoDB's Time to Live deletes, in the tables whose TTL is enabled, every item expired by ``at``
        (epoch seconds; None: now), as ``dynamodb_ttl.py`` tells; the ``table/key`` of each."""
        when = time.time() if at is None else at
        return dynamodb_ttl.expire(dynamodb_backends[self.account][self.region], when)

    def close(self) -> None:
        lambda_invoke.connect(None)
        self.emulator.close()
