"""The lifecycle-hook state machine moto lacks, bound to one moto Auto Scaling backend.

Instances of a group launch into `Pending:Wait` and leave through `Terminating:Wait` while a hook holds them
(a group's warm pool, `warm_pool.py`, adds its own `Warmed:*` states and moves; an instance refresh that replaces
root volumes holds an instance in `ReplacingRootVolume:Wait` under the terminating hooks, then in `Pending:Wait`
under the launching ones);
each hook gets a lifecycle action with a token that `CompleteLifecycleAction` (CONTINUE/ABANDON) or a timeout
(the hook's default result) ends. Heartbeats push the heartbeat deadline but never past the global timeout.
The emulator drives moto's own objects (`InstanceState.lifecycle_state`, the group's instance list, EC2
instances), so moto's Describe* answers show the same states the emulation uses.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from moto.autoscaling.exceptions import AutoscalingClientError, ValidationError
from moto.autoscaling.models import (
    ASG_NAME_TAG,
    FakeAutoScalingGroup,
    InstanceState,
    LifecycleHook,
    TerminateInstanceActivity,
)
from moto.sns.models import sns_backends
from moto.sqs.models import sqs_backends

from nodecycle_sandbox.aws import hook_role, notifications
from nodecycle_sandbox.aws.activities import LAUNCHING as LAUNCHING_ACTIVITY
from nodecycle_sandbox.aws.activities import TERMINATING as TERMINATING_ACTIVITY
from nodecycle_sandbox.aws.activities import ScalingActivity
from nodecycle_sandbox.aws.disruptions import DisruptionEmulator
from nodecycle_sandbox.aws.nodes import NodePlan, NodeRegistry, register_node
from nodecycle_sandbox.aws.records import (
    EC2,
    GROUP,
    LAUNCHING,
    REPLACE_ROOT_VOLUME,
    RESULTS,
    TERMINATING,
    TRANSITIONS,
    WARM_POOL,
    ActionRecord,
    InstanceHistory,
    Notification,
)
from nodecycle_sandbox.aws.refresh import ROLLING, InstanceRefresh
from nodecycle_sandbox.aws.scheduler import Scheduler
from nodecycle_sandbox.aws.warm_pool import WarmPoolEmulator, in_pool, warm_pool_of
from nodecycle_sandbox.iam.resource_policies import service_may

if TYPE_CHECKING:
    from moto.autoscaling.models import AutoScalingBackend

_log = logging.getLogger(__name__)

# The states of an instance refresh's root volume replacement, before it is Pending:Wait under the launch hooks
_REPLACING_ROOT_VOLUME = (
    "ReplacingRootVolume",
    "ReplacingRootVolume:Wait",
    "ReplacingRootVolume:Proceed",
    "RootVolumeReplaced",
)
# States in which an instance counts toward the group's capacity (AWS: terminating and standby do not; one whose
# root volume is replaced stays the group's, which launches no other for it: "This removes the need to launch new
# instances", "Replace root volumes during instance refresh", Amazon EC2 Auto Scaling user guide).
_CAPACITY_STATES = frozenset(
    {"Pending", "Pending:Wait", "Pending:Proceed", "InService", *_REPLACING_ROOT_VOLUME}
)
# How long an instance whose root volume is replaced is down: its kubelet gone from the replacement's start
# (ReplacingRootVolume:Proceed) until it is back on the new volume (RootVolumeReplaced). On AWS the replacement
# detaches the old volume and attaches the new one, the instance rebooted (its task in-progress), and says succeeded
# once the instance is available again (ReplaceRootVolumeTask, EC2 API Reference): never within seconds. Longer here
# than the readiness gate's clock skew allowance (launch.CLOCK_SKEW, 5 s, and a heartbeat cut to the second): the old
# kubelet's last status, posted before the reboot, is never as recent as the launch that follows it, which a 1 s
# reboot made it, a stale Ready then within the allowance a gate gives a kubelet whose clock runs behind.
ROOT_VOLUME_REBOOT_SECONDS = 7.0
# And how much later its kubelet runs again: the operating system boots from the new volume while the launch hooks
# already hold the instance (Pending:Wait), its node object still Ready from before the reboot (the node monitor's
# 40 s grace is not over). A kubelet back at RootVolumeReplaced itself hid a readiness gate that took that stale Ready.
ROOT_VOLUME_BOOT_SECONDS = 3.0
# How long an instance EC2 boots again (a scheduled reboot it carries out, instance-reboot or system-reboot; a
# StartInstances) keeps its kubelet away: its node stays Ready as the old kubelet left it for the node monitor's grace
# (NotReady after it), then its kubelet posts Ready again with the new boot's id. On AWS a boot takes a minute or
# more; short by default for the tests' time.
BOOT_SECONDS = 5.0
# AWS defaults and limits for hooks.
DEFAULT_HEARTBEAT_TIMEOUT = 3600
DEFAULT_GLOBAL_TIMEOUT_FACTOR = 100.0
DEFAULT_GLOBAL_TIMEOUT_CAP = 48 * 3600.0


class EventSink(Protocol):
    """Where EventBridge events go: the default event bus, i.e. the runner's rules in the sandbox."""

    def publish(self, event: dict[str, Any]) -> None: ...


class InstanceRefreshInProgress(AutoscalingClientError):
    """What Auto Scaling answers a StartInstanceRefresh while one runs (``InstanceRefreshInProgress``, HTTP 400)."""

    code = "InstanceRefreshInProgress"

    def __init__(self, group_name: str) -> None:
        super().__init__(f"An Instance Refresh is already in progress for group {group_name}.")


@dataclass
class LifecycleTiming:
    """Global timeout = min(factor x heartbeat timeout, cap), fixed when the hook is put (as AWS does)."""

    global_timeout_factor: float = DEFAULT_GLOBAL_TIMEOUT_FACTOR
    global_timeout_cap: float = DEFAULT_GLOBAL_TIMEOUT_CAP

    def global_timeout(self, heartbeat_timeout: float) -> float:
        return min(heartbeat_timeout * self.global_timeout_factor, self.global_timeout_cap)


def no_active_action(token: str | None, instance_id: str | None) -> ValidationError:
    """AWS's answer to a wrong, foreign or finished lifecycle action."""
    if token:
        return ValidationError(f"No active Lifecycle Action found with token {token}")
    return ValidationError(f"No active Lifecycle Action found with instance ID {instance_id}")


def emulator_for(backend: AutoScalingBackend) -> LifecycleEmulator:
    """The emulator of one moto backend; created with it, so a moto reset also resets the emulation."""
    emulator: LifecycleEmulator | None = getattr(backend, "_nodecycle_emulator", None)
    if emulator is None:
        emulator = LifecycleEmulator(backend)
        backend._nodecycle_emulator = emulator  # type: ignore[attr-defined]
    return emulator


class LifecycleEmulator:
    def __init__(self, backend: AutoScalingBackend) -> None:
        self.backend = backend
        # Re-entrant: a completion terminates an instance, which may launch a replacement, which may
        # start a new action, all under one consistent view of the group.
        self.lock = threading.RLock()
        self.timing = LifecycleTiming()
        self.node_plan = NodePlan()
        self.nodes: NodeRegistry | None = None
        self.events: EventSink | None = None
        # AWS sends every lifecycle action to EventBridge, also when the hook notifies an SQS queue.
        self.eventbridge_for_sqs_hooks = True
        # Whether a call that names an action by its token and an instance id is refused when the token's
        # action is another instance's. AWS documents both calls as acting "for the specified token or
        # instance" and does not say whether it checks the pair (nor is it known): False emulates an Auto
        # Scaling that takes the token alone, the leniency nodecycle must not depend on AWS not having.
        self.token_checked_against_instance = True
        # Likewise whether such a call is refused when the token's action is another group's (or hook's) than the
        # group (and hook) named with it: not documented either. False emulates an Auto Scaling that takes the
        # token alone whatever group is named, so a stack naming its own group with another group's token would
        # reach that group's action.
        self.token_checked_against_group = True
        # Whether a hook's SQS (or SNS) notification carries Origin and Destination. AWS shows them in the
        # EventBridge events ("Instance refresh replace root volume lifecycle events", the warm pools' events) and
        # says the queue's and topic's notifications "contain the same information" ("Configure a notification
        # target for lifecycle notifications"), yet its own message example for SNS and SQS has neither field
        # (Service, Time, RequestId, LifecycleActionToken, AccountId, AutoScalingGroupName, LifecycleHookName,
        # EC2InstanceId, LifecycleTransition, NotificationMetadata). False emulates a notification without them: the
        # instance's lifecycle state alone tells a root volume replacement or a warm pool's move from a
        # termination then.
        self.notifications_tell_origin = True
        # How long after its root volume is replaced (RootVolumeReplaced) an instance's kubelet runs again: on AWS the
        # operating system's boot from the new volume, tens of seconds or more; short by default for the tests' time
        self.root_volume_boot_seconds = ROOT_VOLUME_BOOT_SECONDS
        # Instance id -> its own boot from a new root volume, in place of root_volume_boot_seconds: on AWS each
        # instance boots in its own time, and a test whose instances need a long boot each (to tell a rebooted
        # kubelet from the one before) need not wait it out for those that prove something else
        self.root_volume_boot_seconds_of: dict[str, float] = {}
        # How long an instance EC2 reboots (a scheduled reboot: see disruptions.py) or starts keeps its kubelet away
        self.boot_seconds = BOOT_SECONDS
        # How long after its launch an instance shows the tags Auto Scaling gives it (its group's name, the group's
        # tags that propagate at launch); its launch template's tags come with RunInstances. Auto Scaling promises no
        # moment for them, and instances were seen without them for their first seconds ("AWS Trivia - Broken user
        # data and instance tag timing", unixdaemon.net): a grant on an instance by those tags refuses it until
        # then. 0: at once (moto's)
        self.instance_tags_after_seconds = 0.0
        self.notifications: list[Notification] = []
        self.actions: dict[str, ActionRecord] = {}
        self.instances: dict[str, InstanceHistory] = {}
        self.refreshes: dict[str, InstanceRefresh] = {}
        # The groups' scaling activities (DescribeScalingActivities): an instance's launch into its group, its
        # termination; each begins before the hooks hold the instance, and ends with it in service or gone
        self.activities: list[ScalingActivity] = []
        self._open_activities: dict[
            tuple[str, str], ScalingActivity
        ] = {}  # (instance, description) -> open one
        self._rounds: dict[tuple[str, str], list[str]] = {}
        self._joined: set[str] = set()  # instances whose node was registered (they entered their group once)
        self._scheduler: Scheduler | None = None
        self._closed = False
        # EC2's disruptions without a hook: Spot requests, interruptions, scheduled events, state changes.
        self.disruptions = DisruptionEmulator(self)
        self.pool = WarmPoolEmulator(self)

    # -- configuration --------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the timers; pending actions stay as they are."""
        with self.lock:
            self._closed = True
            scheduler, self._scheduler = self._scheduler, None
        if scheduler is not None:
            scheduler.close()

    def call_at(self, when: float, callback: Callable[[], None]) -> None:
        if self._closed:
            return
        if self._scheduler is None:
            self._scheduler = Scheduler(f"nodecycle-lifecycle-{self.backend.region_name}")
        self._scheduler.call_at(when, callback)

    # -- hooks ----------------------------------------------------------------------------------

    def put_hook(
        self,
        *,
        group: str,
        name: str,
        transition: str | None,
        heartbeat_timeout: int | None,
        default_result: str | None,
        target_arn: str | None,
        metadata: str | None,
        role_arn: str | None,
    ) -> LifecycleHook:
        with self.lock:
            asg = self.group(group)
            # moto's hook class declares only what moto stores; the sandbox adds attributes to it.
            hook: Any = self.backend.lifecycle_hooks.get(f"{group}_{name}")
            if hook is None and transition not in TRANSITIONS:
                raise ValidationError(f"Invalid Lifecycle Transition: {transition}")
            if transition is not None and transition not in TRANSITIONS:
                raise ValidationError(f"Invalid Lifecycle Transition: {transition}")
            if heartbeat_timeout is not None and heartbeat_timeout <= 0:
                raise ValidationError("HeartbeatTimeout must be positive")
            if default_result is not None and default_result not in RESULTS:
                raise ValidationError(f"Invalid DefaultResult: {default_result}")
            # The test notification goes first, to the target and as the role the hook would have: a call
            # refused for it changes nothing (AWS neither creates nor changes the hook then).
            role = role_arn if role_arn is not None else getattr(hook, "role_arn", None)
            if target_arn:
                self._notify(
                    target_arn,
                    notifications.sqs_test_notification(
                        at=time.time(), account=self.backend.account_id, group=group, group_arn=asg.arn
                    ),
                    required=True,
                    role_arn=role,
                    group_arn=asg.arn,
                )
            if hook is None:
                assert transition is not None  # a new hook's transition is checked above
                hook = self.backend.create_lifecycle_hook(
                    name, group, transition, heartbeat_timeout, default_result or "ABANDON"
                )
                hook.notification_target_arn = None
                hook.notification_metadata = None
                hook.role_arn = None
            # PutLifecycleHook on an existing hook changes only what the call names.
            if transition is not None:
                hook.lifecycle_transition = transition
            if heartbeat_timeout is not None:
                hook.heartbeat_timeout = heartbeat_timeout
            if default_result is not None:
                hook.default_result = default_result
            if metadata is not None:
                hook.notification_metadata = metadata
            if role_arn is not None:
                hook.role_arn = role_arn
            hook.global_timeout = int(self.timing.global_timeout(hook.heartbeat_timeout))
            if target_arn is not None:
                hook.notification_target_arn = target_arn or None
            return hook

    def delete_hook(self, group: str, name: str) -> None:
        """DeleteLifecycleHook: "If there are any outstanding lifecycle actions, they are completed first
        (ABANDON for launching instances, CONTINUE for terminating instances)" (AWS). The hook goes before
        they are, so that the replacement of an abandoned launch does not wait for it."""
        with self.lock:
            self.backend.lifecycle_hooks.pop(f"{group}_{name}", None)
            for action in [
                a for a in self.actions.values() if a.active and (a.group, a.hook) == (group, name)
            ]:
                result = "ABANDON" if action.transition == LAUNCHING else "CONTINUE"
                self._finish(action, result, "hook-deleted", None)

    def delete_hooks_of(self, group: str) -> None:
        for key in [k for k, h in self.backend.lifecycle_hooks.items() if h.auto_scaling_group_name == group]:
            del self.backend.lifecycle_hooks[key]

    def hooks(self, group: str, transition: str) -> list[LifecycleHook]:
        # Read from the backend's store, not through DescribeLifecycleHooks, which refuses a group it does not know:
        # CreateAutoScalingGroup launches its desired capacity before moto registers the group (which has no hook yet)
        return [
            hook
            for hook in self.backend.lifecycle_hooks.values()
            if hook.auto_scaling_group_name == group and hook.lifecycle_transition == transition
        ]

    # -- launching ------------------------------------------------------------------------------

    def launch_instances(self, group: FakeAutoScalingGroup, count: int) -> None:
        """Scale out by `count`: instances out of the group's warm pool first, then new ones launched one at a
        time, each into the zone that has the fewest (as AWS balances)."""
        with self.lock:
            for _ in range(count - self.pool.take(group, count)):
                state = self.run_instance(group)
                group.instance_states.append(state)
                self.launched(group, state)

    def run_instance(self, group: FakeAutoScalingGroup) -> InstanceState:
        """A new EC2 instance of the group (`Pending`), not yet among its instances."""
        given = group.get_propagated_tags()  # (Auto Scaling's, which it writes as a step of the launch)
        given[ASG_NAME_TAG] = group.name
        late = self.instance_tags_after_seconds
        tags = {} if late > 0 else dict(given)
        tags.update(group.instance_tags)  # (the launch template's: RunInstances's own)
        associate_public_ip = group.launch_config.associate_public_ip_address if group.launch_config else None
        launch_template = None
        if group.ec2_launch_template is not None:
            launch_template = {"LaunchTemplateId": group.ec2_launch_template.id}
        zone = self._emptiest_zone(group)
        reservation = self.backend.ec2_backend.run_instances(
            group.image_id,
            1,
            group.user_data,
            group.security_groups,
            instance_type=group.instance_type,
            tags={"instance": dict(tags)},
            placement=zone,
            launch_config=group.launch_config,
            launch_template=launch_template,
            is_instance_type_default=False,
            associate_public_ip=associate_public_ip,
            subnet_id=self._subnet_in(group, zone),
            # Without it moto names every instance's DNS after us-east-1.
            region_name=self.backend.region_name,
        )
        instance = reservation.instances[0]
        instance.autoscaling_group = group  # type: ignore[attr-defined]
        if late > 0:
            given = {key: value for key, value in given.items() if key not in group.instance_tags}
            self.call_at(time.time() + late, functools.partial(self._tag_late, instance.id, given))
        self.disruptions.launched(group, instance, [s.instance for s in active_instances(group)])
        return InstanceState(
            instance,
            lifecycle_state="Pending",
            protected_from_scale_in=group.new_instances_protected_from_scale_in,
        )

    def _tag_late(self, instance_id: str, tags: dict[str, str]) -> None:
        """Auto Scaling's tags on the instance, a moment after its launch (see instance_tags_after_seconds)."""
        with self.lock:
            self.backend.ec2_backend.create_tags([instance_id], tags)

    def _emptiest_zone(self, group: FakeAutoScalingGroup) -> str:
        counts = dict.fromkeys(group.availability_zones, 0)
        for state in active_instances(group):
            counts[_zone(state)] = counts.get(_zone(state), 0) + 1
        return min(group.availability_zones, key=lambda zone: counts[zone])

    def _subnet_in(self, group: FakeAutoScalingGroup, zone: str) -> str | None:
        if not group.vpc_zone_identifier:
            return None
        subnets = self.backend.ec2_backend.describe_subnets(subnet_ids=group.vpc_zone_identifier.split(","))
        return next(subnet.id for subnet in subnets if subnet.availability_zone == zone)

    def launched(self, group: FakeAutoScalingGroup, state: InstanceState, destination: str = GROUP) -> None:
        """A new instance, into the group or into its warm pool (`destination`), through the launch hooks."""
        instance = state.instance
        self.instances[instance.id] = InstanceHistory(
            instance_id=instance.id,
            group=group.name,
            zone=_zone(state),
            node_name=instance.private_dns_name,
            launched_at=time.time(),
        )
        if destination == GROUP:
            self._activity(
                group,
                state,
                LAUNCHING_ACTIVITY,
                "an instance was started in response to a difference between desired and actual capacity",
            )
            self.join(state)
        self.enter(group, state, origin=EC2, destination=destination)

    def join(self, state: InstanceState) -> None:
        """The instance's kubelet registers its node, as the node plan says. Once per instance: its first entry
        into the group (an instance warmed in a pool does not join the cluster before it leaves the pool: the
        user data AWS documents for warm pools starts the kubelet only then)."""
        instance = state.instance
        self._joined.add(instance.id)
        join = self.node_plan.next_join()
        if self.nodes is None:
            return
        register = functools.partial(
            register_node,
            self.nodes,
            copy.copy(self.node_plan),
            name=instance.private_dns_name,
            instance_id=instance.id,
            zone=_zone(state),
            join=join,
        )
        if self.node_plan.join_after > 0:
            timer = threading.Timer(self.node_plan.join_after, register)
            timer.daemon = True
            timer.start()
        else:
            register()

    def joined(self, instance_id: str) -> bool:
        return instance_id in self._joined

    def enter(
        self,
        group: FakeAutoScalingGroup,
        state: InstanceState,
        *,
        origin: str,
        destination: str,
        action: str = "",
    ) -> None:
        """The launch hooks' round of an instance going into the group or its warm pool (``action``: its events'
        Action, for an instance back from its root volume replacement)."""
        hooks = self.hooks(group.name, LAUNCHING)
        if not hooks:
            self._launch_proceeds(group, state, destination)
            return
        state.lifecycle_state = "Warmed:Pending:Wait" if destination == WARM_POOL else "Pending:Wait"
        self.start_round(group, state, hooks, origin=origin, destination=destination, action=action)

    # -- root volume replacement (an instance refresh's ReplaceRootVolume strategy) -----------------------

    def replace_root_volume(self, group: FakeAutoScalingGroup, state: InstanceState) -> None:
        """Replace the root volume of an instance in service, as an instance refresh with the ReplaceRootVolume
        strategy does ("Replace root volumes during instance refresh", Amazon EC2 Auto Scaling user guide): the
        instance goes ReplacingRootVolume, waits in ReplacingRootVolume:Wait while the group's *terminating* hooks
        hold it (their events: EC2_INSTANCE_TERMINATING, Origin and Destination "AutoScalingGroup", Action
        "ReplaceRootVolume"), then ReplacingRootVolume:Proceed (the instance reboots on its new volume: its
        kubelet gone), RootVolumeReplaced, and Pending:Wait while the *launching* hooks hold it (the same Origin,
        Destination and Action) before it is in service again. The same instance all along, with its network
        interfaces and addresses; its node object stays, and whatever cordon was on it."""
        with self.lock:
            state.lifecycle_state = "ReplacingRootVolume"
            hooks = self.hooks(group.name, TERMINATING)
            if not hooks:
                self._replace_root_volume_now(group, state)
                return
            state.lifecycle_state = "ReplacingRootVolume:Wait"
            self.start_round(group, state, hooks, origin=GROUP, destination=GROUP, action=REPLACE_ROOT_VOLUME)

    def _replace_root_volume_now(self, group: FakeAutoScalingGroup, state: InstanceState) -> None:
        """The replacement itself: the instance reboots on its new root volume, whatever still ran on its node
        killed with its kubelet; back ROOT_VOLUME_REBOOT_SECONDS later, through the launch hooks."""
        instance_id = state.instance.id
        state.lifecycle_state = "ReplacingRootVolume:Proceed"
        history = self.instances.get(instance_id)
        if history is not None:
            history.root_volume_replaced_at.append(time.time())
            if self.nodes is not None:
                self.nodes.instance_rebooting(history.node_name)
        back = functools.partial(self._root_volume_replaced, group.name, instance_id)
        self.call_at(time.time() + ROOT_VOLUME_REBOOT_SECONDS, back)

    def _root_volume_replaced(self, group_name: str, instance_id: str) -> None:
        with self.lock:
            found = self.find_state(instance_id)
            if found is None or found[1].lifecycle_state != "ReplacingRootVolume:Proceed":
                return  # (terminated meanwhile)
            group, state = found
            if group.name != group_name:
                return
            state.lifecycle_state = "RootVolumeReplaced"
            boot = self.root_volume_boot_seconds_of.get(instance_id, self.root_volume_boot_seconds)
            self.instance_started(instance_id, boot=boot)
            self.enter(group, state, origin=GROUP, destination=GROUP, action=REPLACE_ROOT_VOLUME)

    def _launch_proceeds(self, group: FakeAutoScalingGroup, state: InstanceState, destination: str) -> None:
        if destination == WARM_POOL:
            self.pool.warmed(group, state)
            return
        state.lifecycle_state = "Pending:Proceed"
        self._put_in_service(group, state)

    def _put_in_service(self, group: FakeAutoScalingGroup, state: InstanceState) -> None:
        state.lifecycle_state = "InService"
        self._activity_ended(state.instance.id, LAUNCHING_ACTIVITY, "Successful")
        self.instances[state.instance.id].in_service_at = time.time()
        self._progress(group.name)

    # -- terminating ----------------------------------------------------------------------------

    def begin_terminate(self, group: FakeAutoScalingGroup, state: InstanceState, cause: str) -> None:
        with self.lock:
            if state.lifecycle_state.startswith(("Terminating", "Warmed:Terminating")):
                return
            pooled = in_pool(state)
            for transition in TRANSITIONS:  # (a launch, or a move into the warm pool, under way)
                self._cancel_round(state.instance.id, transition)
            history = self.instances.get(state.instance.id)
            if history is not None:
                history.terminate_started_at = time.time()
                history.termination_cause = cause
            self._activity(
                group, state, TERMINATING_ACTIVITY, f"an instance was taken out of service ({cause})"
            )
            hooks = self.hooks(group.name, TERMINATING)
            if not hooks:
                self.terminate_now(group, state)
                return
            state.lifecycle_state = "Warmed:Terminating:Wait" if pooled else "Terminating:Wait"
            self.start_round(group, state, hooks, origin=WARM_POOL if pooled else GROUP, destination=EC2)

    def terminate_now(self, group: FakeAutoScalingGroup, state: InstanceState) -> None:
        state.lifecycle_state = "Warmed:Terminating:Proceed" if in_pool(state) else "Terminating:Proceed"
        group.instance_states = [s for s in group.instance_states if s is not state]
        self._terminated(state.instance.id)
        self._progress(group.name)

    def _terminated(self, instance_id: str) -> None:
        """The group's termination of an instance: gone, EC2's instance terminated, and its state changes told
        (EC2 tells EventBridge of every state change of an instance, whoever asked for it: the group's own
        terminations too, not only those outside its hooks)."""
        self._instance_gone(instance_id)
        self.backend.ec2_backend.terminate_instances([instance_id])
        self.disruptions.state_changed([instance_id], ("shutting-down", "terminated"))

    def _instance_gone(self, instance_id: str) -> None:
        """The instance stops existing: its actions end and its node leaves the cluster."""
        for transition in TRANSITIONS:
            self._cancel_round(instance_id, transition)
        self._activity_ended(instance_id, LAUNCHING_ACTIVITY, "Cancelled")
        self._activity_ended(instance_id, TERMINATING_ACTIVITY, "Successful")
        history = self.instances.get(instance_id)
        if history is None or history.terminated_at is not None:
            return
        history.terminated_at = time.time()
        if history.terminate_started_at is None:
            history.terminate_started_at = history.terminated_at
        if self.nodes is not None:
            delay = self.node_plan.remove_after
            if delay > 0:
                # its kubelet goes with it at once: the node lingers without one until the cloud provider deletes it
                self.nodes.instance_terminated(history.node_name)
                timer = threading.Timer(delay, self.nodes.remove_node, args=(history.node_name,))
                timer.daemon = True
                timer.start()
            else:
                self.nodes.remove_node(history.node_name)

    def _activity(
        self, group: FakeAutoScalingGroup, state: InstanceState, description: str, cause: str
    ) -> None:
        """A scaling activity of ``group`` for the instance begins (see activities.py)."""
        now = time.time()
        at = datetime.fromtimestamp(now, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        activity = ScalingActivity(
            group=group.name,
            group_arn=group.arn,
            instance_id=state.instance.id,
            description=description,
            cause=f"At {at} {cause}.",
            zone=_zone(state),
            started_at=now,
        )
        self.activities.append(activity)
        self._open_activities[(activity.instance_id, description)] = activity

    def _activity_ended(self, instance_id: str, description: str, status: str) -> None:
        """The instance's open activity of that kind, if any, ends now with ``status``."""
        activity = self._open_activities.pop((instance_id, description), None)
        if activity is not None:
            activity.ended_at, activity.status = time.time(), status

    def instance_stopped(self, instance_id: str) -> None:
        """The instance stopped (by anyone, or by a maintenance): its node stays, and goes NotReady."""
        history = self.instances.get(instance_id)
        if history is not None and self.nodes is not None:
            self.nodes.instance_stopped(history.node_name)

    def instance_rebooted(self, instance_id: str, *, boot: float) -> None:
        """The instance reboots (EC2 stays ``running``): its kubelet is gone at once, its node still Ready for the
        node monitor's grace, and back ``boot`` seconds later with the new boot's id."""
        history = self.instances.get(instance_id)
        if history is None or self.nodes is None:
            return
        history.rebooted_at.append(time.time())
        self.nodes.instance_rebooting(history.node_name)
        self.instance_started(instance_id, boot=boot)

    def instance_started(self, instance_id: str, *, boot: float = 0.0) -> None:
        """The instance runs again: its kubelet is back `boot` seconds later (its node, Ready again)."""
        if self.nodes is not None:
            self._to_its_node(instance_id, self.nodes.instance_started, after=boot)

    def instance_resumed(self, instance_id: str, *, after: float = 0.0) -> None:
        """The instance resumes from hibernation: its kubelet runs on ``after`` seconds later, on the same boot."""
        if self.nodes is not None:
            self._to_its_node(instance_id, self.nodes.instance_resumed, after=after)

    def _to_its_node(self, instance_id: str, act: Callable[[str], None], *, after: float) -> None:
        """``act`` on the instance's node (by its name) ``after`` seconds from now, or at once."""
        history = self.instances.get(instance_id)
        if history is None:
            return
        if after > 0:
            timer = threading.Timer(after, act, args=(history.node_name,))
            timer.daemon = True
            timer.start()
        else:
            act(history.node_name)

    def scale_in(self, group: FakeAutoScalingGroup, count: int) -> None:
        for state in self._victims(group, count):
            if self.pool.reuses(group):
                # (a victim not yet in service leaves its launch as a terminated one does: the group's move of it
                # into the pool ends its launch action, which a completion then finds gone, never putting in
                # service an instance the terminate hook holds on its way to the pool)
                self._cancel_round(state.instance.id, LAUNCHING)
                self.pool.scale_in_to(group, state)
            else:
                self.begin_terminate(group, state, "scale-in")

    def _victims(self, group: FakeAutoScalingGroup, count: int) -> list[InstanceState]:
        """AWS's default termination policy, simplified: the zone with the most instances, oldest first."""
        candidates = [s for s in active_instances(group) if not s.protected_from_scale_in]
        chosen: list[InstanceState] = []
        for _ in range(min(count, len(candidates))):
            per_zone: dict[str, int] = {}
            for state in candidates:
                per_zone[_zone(state)] = per_zone.get(_zone(state), 0) + 1
            zone = max(per_zone, key=lambda z: per_zone[z])
            victim = min(
                (s for s in candidates if s.availability_zone == zone), key=lambda s: s.instance.launch_time
            )
            candidates.remove(victim)
            chosen.append(victim)
        return chosen

    def terminate_instance(self, instance_id: str, should_decrement: bool) -> TerminateInstanceActivity:
        """TerminateInstanceInAutoScalingGroup: through the terminate hooks, replaced unless decremented."""
        with self.lock:
            found = self.find_state(instance_id)
            if found is None:
                raise ValidationError(
                    f"Instance Id not found - No managed instance found for instance ID: {instance_id}"
                )
            group, state = found
            original = int(group.desired_capacity or 0)
            if should_decrement:
                if original <= int(group.min_size or 0):
                    raise ValidationError(
                        f"Currently, desiredSize equals minSize ({group.min_size}). Terminating instance "
                        "without replacement will violate group's min size constraint. Either set shouldDecre"
                        "mentDesiredCapacity flag to false or lower group's min size."
                    )
                group.desired_capacity = original - 1
            self.begin_terminate(group, state, "user-request")
            group.set_desired_capacity(group.desired_capacity)
            return TerminateInstanceActivity(state.instance, original)

    def forget_instances(self, instance_ids: list[str]) -> None:
        """EC2 terminated these instances behind the group's back (TerminateInstances)."""
        with self.lock:
            for instance_id in instance_ids:
                if instance_id in self.instances:
                    self._instance_gone(instance_id)

    def delete_group(self, group: FakeAutoScalingGroup) -> None:
        """DeleteAutoScalingGroup: like ForceDelete, instances go at once and hooks are not consulted."""
        with self.lock:
            for state in list(group.instance_states):
                self._terminated(state.instance.id)
            group.instance_states = []
            self.delete_hooks_of(group.name)
            for refresh in self.refreshes.values():
                if refresh.group == group.name and refresh.status == "InProgress":
                    refresh.finish("Cancelled", time.time())

    # -- lifecycle actions ------------------------------------------------------------------------

    def start_round(
        self,
        group: FakeAutoScalingGroup,
        state: InstanceState,
        hooks: list[LifecycleHook],
        *,
        origin: str,
        destination: str,
        action: str = "",
    ) -> None:
        """One action per hook of the transition; the instance moves on once all are over. A new round of the
        same transition (an instance back from its warm pool) starts afresh. ``action``: its events' Action
        (REPLACE_ROOT_VOLUME), if any."""
        self._rounds[(state.instance.id, str(hooks[0].lifecycle_transition))] = []
        for hook in hooks:
            self._start_action(group, state, hook, origin=origin, destination=destination, kind=action)

    def _start_action(
        self,
        group: FakeAutoScalingGroup,
        state: InstanceState,
        hook: Any,
        *,
        origin: str,
        destination: str,
        kind: str = "",
    ) -> None:
        now = time.time()
        transition: str = hook.lifecycle_transition
        action = ActionRecord(
            token=str(uuid.uuid4()),
            group=group.name,
            hook=hook.name,
            instance_id=state.instance.id,
            transition=transition,
            default_result=hook.default_result,
            heartbeat_timeout=float(hook.heartbeat_timeout),
            global_timeout=float(getattr(hook, "global_timeout", hook.heartbeat_timeout)),
            started_at=now,
            origin=origin,
            destination=destination,
            action=kind,
        )
        self.actions[action.token] = action
        self._rounds.setdefault((action.instance_id, transition), []).append(action.token)
        self.call_at(action.deadline, lambda: self._check_timeout(action.token))
        metadata: str | None = getattr(hook, "notification_metadata", None)
        target: str | None = getattr(hook, "notification_target_arn", None)
        if target:
            self._notify(
                target,
                notifications.sqs_lifecycle_body(
                    at=now,
                    account=self.backend.account_id,
                    group=group.name,
                    hook=hook.name,
                    instance_id=action.instance_id,
                    transition=transition,
                    token=action.token,
                    metadata=metadata,
                    origin=origin if self.notifications_tell_origin else None,
                    destination=destination if self.notifications_tell_origin else None,
                ),
                required=False,
                role_arn=getattr(hook, "role_arn", None),
                group_arn=group.arn,
            )
        if not target or self.eventbridge_for_sqs_hooks:
            event = notifications.eventbridge_event(
                at=now,
                account=self.backend.account_id,
                region=self.backend.region_name,
                group_arn=group.arn,
                group=group.name,
                hook=hook.name,
                instance_id=action.instance_id,
                transition=transition,
                token=action.token,
                metadata=metadata,
                origin=origin,
                destination=destination,
                action=kind,
            )
            self.notifications.append(Notification(now, "eventbridge", event))
            if self.events is not None:
                self.events.publish(event)

    def complete(
        self,
        *,
        group: str,
        hook: str,
        result: str,
        token: str | None,
        instance_id: str | None,
        caller: str,
    ) -> None:
        with self.lock:
            if result not in RESULTS:
                raise ValidationError(
                    f"Value {result} at 'lifecycleActionResult' failed to satisfy constraint: "
                    "Member must be CONTINUE or ABANDON"
                )
            action = self._active_action(group, hook, token, instance_id, caller, "CompleteLifecycleAction")
            self._finish(action, result, "completed", caller)

    def heartbeat(
        self, *, group: str, hook: str, token: str | None, instance_id: str | None, caller: str
    ) -> None:
        with self.lock:
            action = self._active_action(
                group, hook, token, instance_id, caller, "RecordLifecycleActionHeartbeat"
            )
            # "This extends the timeout by the length of time defined using the PutLifecycleHook API call"
            # (RecordLifecycleActionHeartbeat's reference): the hook's heartbeat timeout as it is now, one an
            # operator lowered since the action started included. AWS does not document that an action keeps the
            # timeout its hook had at its start; the sandbox takes the harsher reading.
            before = action.deadline
            current: Any = self.backend.lifecycle_hooks.get(f"{action.group}_{action.hook}")
            if current is not None and current.heartbeat_timeout:
                action.heartbeat_timeout = float(current.heartbeat_timeout)
            action.heartbeats.append(time.time())
            action.heartbeat_callers.append(caller)
            if action.deadline < before:  # (the timer set for the later deadline would end it late)
                self.call_at(action.deadline, lambda: self._check_timeout(action.token))

    def _active_action(
        self, group: str, hook: str, token: str | None, instance_id: str | None, caller: str, operation: str
    ) -> ActionRecord:
        if token:
            candidates = [self.actions[token]] if token in self.actions else []
        else:
            candidates = [a for a in self.actions.values() if a.instance_id == instance_id]
        matching = [
            a
            for a in candidates
            if (
                (a.group == group and a.hook == hook)
                or (bool(token) and not self.token_checked_against_group and a.hook == hook)
            )
            and (
                instance_id is None
                or a.instance_id == instance_id
                or (bool(token) and not self.token_checked_against_instance)
            )
        ]
        for action in matching:
            self._time_out_if_due(action)
        active = [a for a in matching if a.active]
        if active:
            return active[0]
        if matching:
            matching[-1].late_calls.append((time.time(), caller, operation))
        raise no_active_action(token, instance_id)

    def _check_timeout(self, token: str) -> None:
        with self.lock:
            action = self.actions[token]
            if self._closed or not action.active:
                return
            if not self._time_out_if_due(action):
                # A heartbeat moved the deadline since this timer was set.
                self.call_at(action.deadline, lambda: self._check_timeout(token))

    def _time_out_if_due(self, action: ActionRecord) -> bool:
        """End an active action whose deadline has passed with its default result, as of that deadline.

        Auto Scaling ends it at the deadline; the sandbox's timer may fire late (a loaded machine, the lock
        held by a burst of launches), and a heartbeat or completion that came in between must not find it
        still active and keep it alive."""
        if not action.active or time.time() < action.deadline:
            return False
        outcome = "global-timeout" if action.deadline >= action.global_deadline else "heartbeat-timeout"
        self._finish(action, action.default_result, outcome, None, at=action.deadline)
        return True

    def _finish(
        self, action: ActionRecord, result: str, outcome: str, caller: str | None, at: float | None = None
    ) -> None:
        action.finished_at = time.time() if at is None else at
        action.result = result
        action.outcome = outcome
        action.completed_by = caller
        round_ = [self.actions[t] for t in self._rounds.get((action.instance_id, action.transition), [])]
        # At terminate, ABANDON "stops any remaining actions, such as other lifecycle hooks" (AWS): the instance
        # goes at once, and terminating it ends the other hooks' actions. CONTINUE lets them finish.
        abandoned_at_terminate = action.transition == TERMINATING and result == "ABANDON"
        if any(a.active for a in round_) and not abandoned_at_terminate:
            return  # another hook of the same transition still holds the instance
        found = self.find_state(action.instance_id)
        if found is None:
            return
        group, state = found
        if action.transition == TERMINATING and action.destination == WARM_POOL:
            self.pool.returned(group, state)  # scaled in to the pool: back there whatever the result
        elif action.transition == TERMINATING and action.action == REPLACE_ROOT_VOLUME:
            # AWS documents no result that stops a replacement the hooks held: whatever the result, it goes on
            self._replace_root_volume_now(group, state)
        elif action.transition == TERMINATING:
            self.terminate_now(group, state)
        elif any(a.result == "ABANDON" for a in round_):
            # A launch that is abandoned is terminated without termination hooks, then replaced.
            history = self.instances[action.instance_id]
            history.terminate_started_at = time.time()
            history.termination_cause = "launch-abandoned"
            self.terminate_now(group, state)
            group.set_desired_capacity(group.desired_capacity)
        else:
            self._launch_proceeds(group, state, action.destination)

    def _cancel_round(self, instance_id: str, transition: str) -> None:
        now = time.time()
        for token in self._rounds.get((instance_id, transition), []):
            action = self.actions[token]
            if action.active:
                action.finished_at = now
                action.outcome = "cancelled"

    # -- instance refresh -----------------------------------------------------------------------

    def start_refresh(
        self,
        group_name: str,
        *,
        min_healthy_percentage: int,
        instance_warmup: float,
        strategy: str = ROLLING,
    ) -> InstanceRefresh:
        with self.lock:
            group = self.group(group_name)
            if strategy not in (ROLLING, REPLACE_ROOT_VOLUME):
                raise ValidationError(f"Invalid Strategy: {strategy}")
            if strategy == REPLACE_ROOT_VOLUME and warm_pool_of(group) is not None:
                # ("You can't start an instance refresh with Replace Root Volume on an EC2 Auto Scaling Group that
                # has a warm pool": "Replace root volumes during instance refresh", its limitations)
                raise ValidationError(
                    f"An instance refresh with strategy {strategy} cannot start on group {group_name}: it has a "
                    "warm pool"
                )
            if any(r.group == group_name and r.status == "InProgress" for r in self.refreshes.values()):
                raise InstanceRefreshInProgress(group_name)
            refresh = InstanceRefresh.plan(
                group_name=group_name,
                instance_ids=[s.instance.id for s in active_instances(group)],
                desired_capacity=group.desired_capacity or 0,
                min_healthy_percentage=min_healthy_percentage,
                instance_warmup=instance_warmup,
                started_at=time.time(),
                strategy=strategy,
            )
            self.refreshes[refresh.refresh_id] = refresh
            self._advance_refresh(refresh)
            return refresh

    def cancel_refresh(self, group_name: str) -> str:
        with self.lock:
            for refresh in self.refreshes.values():
                if refresh.group == group_name and refresh.status == "InProgress":
                    refresh.finish("Cancelled", time.time())
                    return refresh.refresh_id
            raise ValidationError(f"No in progress or pending Instance Refresh found for group {group_name}")

    def _progress(self, group_name: str) -> None:
        # Refreshes advance on the timer thread: this may run deep inside a launch or a termination.
        for refresh in self.refreshes.values():
            if refresh.group == group_name and refresh.status == "InProgress":
                self.call_at(time.time(), functools.partial(self._advance_locked, refresh))

    def _advance_locked(self, refresh: InstanceRefresh) -> None:
        with self.lock:
            self._advance_refresh(refresh)

    def _advance_refresh(self, refresh: InstanceRefresh) -> None:
        if refresh.status != "InProgress":
            return
        group = self.backend.autoscaling_groups.get(refresh.group)
        if group is None:
            refresh.finish("Failed", time.time())
            return
        now = time.time()
        step = refresh.step(group, self.instances, now)
        if step.wake_at is not None:
            self.call_at(step.wake_at, lambda: self._advance_locked(refresh))
        if refresh.strategy == REPLACE_ROOT_VOLUME:
            for state in step.terminate:
                self.replace_root_volume(group, state)
            return
        for state in step.terminate:
            self.begin_terminate(group, state, "instance-refresh")
        if step.terminate:
            group.set_desired_capacity(group.desired_capacity)

    # -- helpers --------------------------------------------------------------------------------

    def group(self, name: str) -> FakeAutoScalingGroup:
        group = self.backend.autoscaling_groups.get(name)
        if group is None:
            raise ValidationError(f"AutoScalingGroup name not found - AutoScalingGroup '{name}' not found")
        return group

    def find_state(self, instance_id: str) -> tuple[FakeAutoScalingGroup, InstanceState] | None:
        for group in self.backend.autoscaling_groups.values():
            for state in group.instance_states:
                if state.instance.id == instance_id:
                    return group, state
        return None

    def _notify(
        self,
        target_arn: str,
        body: dict[str, Any],
        *,
        required: bool,
        role_arn: str | None = None,
        group_arn: str = "",
    ) -> None:
        """Notify the hook's target, an SQS queue or an SNS topic, as its role (when it has one). ``required``:
        the hook's test notification at PutLifecycleHook, whose failure refuses the hook; later ones are lost
        with a warning, as Auto Scaling's are. A topic accepts a publish whatever becomes of its deliveries."""
        _, _, service, region, account, name = target_arn.split(":", 5)
        if service not in ("sqs", "sns"):
            raise ValidationError(
                f"The sandbox delivers lifecycle notifications to SQS or SNS only, not {target_arn}"
            )
        message = json.dumps(body)
        try:
            if role_arn:  # Auto Scaling sends with the hook's role: its trust and its policies must allow it
                hook_role.authorize(role_arn, self.backend.account_id, group_arn, target_arn)
            if service == "sqs":
                sqs_backends[account][region].send_message(name, message)
            else:
                sns_backends[account][region].get_topic(
                    target_arn
                )  # a topic that is gone refuses the publish
        except Exception as error:  # moto raises several kinds for a missing queue or topic
            if required:
                raise ValidationError(
                    f"Unable to publish test message to notification target {target_arn} using IAM role "
                    "arn. Please check your target and role configuration and try to put lifecycle hook again."
                ) from error
            _log.warning("lifecycle notification to %s failed: %s", target_arn, error)
            return
        if service == "sns":
            _fan_out(target_arn, message, notifications.sns_subject(body))
        self.notifications.append(Notification(time.time(), target_arn, body))


def _fan_out(topic_arn: str, message: str, subject: str) -> None:
    """SNS delivering a published message to the topic's SQS subscriptions (other protocols are not emulated):
    in its envelope, or as it is with RawMessageDelivery. SNS sends as the service ``sns.amazonaws.com`` on
    behalf of the topic, so the queue's own policy must allow that (no identity policy is involved: a queue
    without a policy refuses it); a subscription whose filter policy refuses the message (a hook notification has
    no message attributes) gets nothing. A refused delivery is lost for the publisher, who is never told."""
    region, account = topic_arn.split(":")[3:5]
    backend = sns_backends[account][region]
    subscriptions, _ = backend.list_subscriptions_by_topic(topic_arn)
    for subscription in subscriptions:
        if subscription.protocol != "sqs":
            continue
        matcher = getattr(subscription, "_filter_policy_matcher", None)
        if matcher is not None and not matcher.matches({}, message):
            continue
        queue_arn = subscription.endpoint
        queue_region, queue_account, queue_name = queue_arn.split(":")[3:6]
        queues = sqs_backends[queue_account][queue_region]
        try:
            queue = queues.get_queue(queue_name)
        except Exception as error:  # moto's QueueDoesNotExist
            _log.warning("SNS could not deliver to %s: %s", queue_arn, error)
            continue
        if not service_may(
            queue.policy,
            service="sns.amazonaws.com",
            action="sqs:SendMessage",
            resource=queue_arn,
            source_arn=topic_arn,
            source_account=account,
        ):
            _log.warning(
                "SNS could not deliver to %s: its queue policy does not allow topic %s", queue_arn, topic_arn
            )
            continue
        if subscription.attributes.get("RawMessageDelivery") in (True, "true"):
            queues.send_message(queue_name, message)
            continue
        envelope = notifications.sns_envelope(
            at=time.time(),
            topic_arn=topic_arn,
            subscription_arn=subscription.arn,
            subject=subject,
            message=message,
        )
        queues.send_message(queue_name, json.dumps(envelope, indent=2))


def _zone(state: InstanceState) -> str:
    return str(state.availability_zone)


def active_instances(group: FakeAutoScalingGroup) -> list[InstanceState]:
    """Instances that count toward capacity: pending and in service, not terminating or in standby."""
    return [s for s in group.instance_states if s.lifecycle_state in _CAPACITY_STATES]
