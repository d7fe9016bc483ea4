"""Disruptions that no Auto Scaling hook starts, emulated as EC2 and AWS Health show them.

- Spot capacity: a group with a ``MixedInstancesPolicy`` launches Spot instances per its instances
  distribution (on-demand base, then the on-demand percentage above it); each gets a Spot request in moto
  (``DescribeSpotInstanceRequests``) and ``SpotInstanceRequestId``/``InstanceLifecycle`` in
  ``DescribeInstances``.
- A Spot interruption: the request's status turns ``marked-for-termination``, the warning goes to the event
  bus (with the instance's rebalance recommendation, when EC2 sent none before: it always sends both), Auto Scaling starts terminating the instance (its terminate hooks) shortly after, and EC2 terminates
  it ``warning_seconds`` after the warning whatever the hooks say (then the request is closed).
- A rebalance recommendation (Spot instances only): the event; and, in a group with Capacity Rebalancing on,
  Auto Scaling's replacement of the instance: a new instance launched (over the desired capacity meanwhile), and
  once it is in service the old one terminated through the terminate hooks. Two lifecycles of one node then: the
  recommendation's and the terminate hook's.
- Scheduled maintenance: the event in ``DescribeInstanceStatus`` (code, ``NotBefore``, ``NotAfter``) and the
  AWS Health event; then EC2 carrying it out (a reboot reboots the instance: its kubelet gone, its node Ready as
  the old kubelet left it until the node monitor's grace is over, back on a new boot; system maintenance leaves the
  instance running; a stop or retirement stops it) or calling it off, after which it lists the event with its
  description prefixed ``[Completed]`` or ``[Canceled]``, as EC2 does for a week, and AWS Health sends its event
  again, closed (``statusCode``), under the same ARN. The event is listed ``[Completed]`` as the reboot begins:
  a look at EC2 may find it over while the instance still boots.
- State changes: ``TerminateInstances``/``StopInstances`` called by anyone, and a Spot interruption that the
  hooks did not finish first, publish ``shutting-down``/``terminated`` and ``stopping``/``stopped``; so do the
  group's own terminations through its hooks and its stops into a warm pool (``lifecycle.py``, ``warm_pool.py``):
  EC2 tells of every state change, whoever asked for it.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from moto.ec2.models.spot_requests import SpotInstanceRequest
from moto.ec2.utils import random_spot_request_id

from nodecycle_sandbox.aws import ec2_events
from nodecycle_sandbox.aws.records import Notification

if TYPE_CHECKING:
    from moto.autoscaling.models import FakeAutoScalingGroup, InstanceState
    from moto.ec2.models.instances import Instance

    from nodecycle_sandbox.aws.lifecycle import LifecycleEmulator

SPOT_WARNING_SECONDS = 120.0  # EC2 reclaims a Spot instance two minutes after its warning
# Auto Scaling learns of the interruption from EC2 and starts terminating the instance shortly after.
SPOT_HOOK_AFTER_SECONDS = 2.0
MARKED = "marked-for-termination"
# How often Auto Scaling looks whether the replacement of an instance at risk is in service (Capacity Rebalancing)
REBALANCE_LOOK_SECONDS = 0.2
# The scheduled events EC2 carries out by stopping the instance (the others reboot it, or leave it running)
GOING_CODES = frozenset({"instance-stop", "instance-retirement"})
# The scheduled events EC2 carries out by rebooting the instance: "Scheduled Reboot: When Amazon EC2 determines that an
# instance must be rebooted, the instance's status returns one of two event codes: system-reboot or instance-reboot"
# (EC2 API Reference, DescribeInstanceStatus). The instance stays running; its operating system boots again, so its
# kubelet stops, its node stays Ready as it left it for the node monitor's grace (40 s), then the new kubelet posts
# Ready with the new boot's id (the kubelet's MachineInfo setter, pkg/kubelet/nodestatus: status.nodeInfo.bootID, a
# Rebooted event when it changed). (A system-maintenance is network maintenance, which reboots nothing, or power
# maintenance, which does: emulated as the first.)
REBOOT_CODES = frozenset({"instance-reboot", "system-reboot"})


@dataclass
class _Told:
    """An AWS Health event of scheduled maintenance as it was told: its instances, code and window, and the
    instances whose part of it is over."""

    instances: list[str]
    code: str
    starts: float
    ends: float
    resolved: set[str] = field(default_factory=set)


ENDED = ("[Completed]", "[Canceled]")  # how EC2 prefixes the description of an event over or called off


# Controls, not AWS APIs: what they refuse (interrupting an On-Demand instance) raises ValueError.


class _GroupSpotRequest(SpotInstanceRequest):
    """The Spot request Auto Scaling makes for a Spot instance of a group: moto's model, bound to the
    instance the group launched instead of launching one of its own."""

    def __init__(self, ec2_backend: Any, instance: Instance) -> None:
        self._group_instance = instance
        super().__init__(
            ec2_backend,
            spot_request_id=random_spot_request_id(),
            price="",
            image_id=instance.image_id,
            spot_instance_type="one-time",
            valid_from=None,
            valid_until=None,
            launch_group=None,
            availability_zone_group=None,
            key_name=instance.key_name or "",
            security_groups=[],
            user_data=None,
            instance_type=instance.instance_type,
            placement=instance.placement.zone,
            kernel_id=None,
            ramdisk_id=None,
            monitoring_enabled=False,
            subnet_id=instance.subnet_id or "",
            tags={},
            spot_fleet_id=None,
            instance_interruption_behaviour="terminate",
        )

    def launch_instance(self) -> Instance:
        return self._group_instance

    def mark(self, code: str, message: str, *, state: str | None = None) -> None:
        self._status_code = code
        self.status_message = message
        if state is not None:
            self.state = state


def wants_spot(group: FakeAutoScalingGroup, launched: Iterable[Instance]) -> bool:
    """Whether the group's next instance is Spot: its instances distribution, over what it runs now."""
    policy = group.mixed_instances_policy or {}
    if not policy:
        return False
    distribution = policy.get("InstancesDistribution") or {}
    base = int(distribution.get("OnDemandBaseCapacity", 0) or 0)
    percentage = int(distribution.get("OnDemandPercentageAboveBaseCapacity", 100) or 0)
    running = list(launched)
    on_demand = sum(1 for instance in running if getattr(instance, "instance_lifecycle", None) != "spot")
    if on_demand < base:
        return False
    above = len(running) - base + 1  # counting the one about to launch
    wanted_on_demand = math.ceil(above * percentage / 100)
    return on_demand - base >= wanted_on_demand


class DisruptionEmulator:
    """EC2's side of the disruptions of one emulated region (it shares the lifecycle emulator's lock)."""

    def __init__(self, lifecycle: LifecycleEmulator) -> None:
        self._lifecycle = lifecycle
        self.spot_requests: dict[str, _GroupSpotRequest] = {}  # instance id -> its request
        # scheduled event id -> the AWS Health event that told of it (its ARN), which closes when it ends
        self._health_arns: dict[str, str] = {}
        # instances at risk whose replacement Capacity Rebalancing launched (one per instance, however often told)
        self._replacing: set[str] = set()
        # instances EC2 recommended rebalancing (an interruption of one not among them is told with its recommendation)
        self._recommended: set[str] = set()
        # Each Health event as it was told, by its ARN: its instances, code and window, and the instances whose part
        # of it is over. An update names them all, each with its status, and closes the event once none is left.
        self._health_told: dict[str, _Told] = {}

    @property
    def _ec2(self) -> Any:
        return self._lifecycle.backend.ec2_backend

    def _publish(self, event: dict[str, Any]) -> None:
        lifecycle = self._lifecycle
        lifecycle.notifications.append(Notification(time.time(), "eventbridge", event))
        if lifecycle.events is not None:
            lifecycle.events.publish(event)

    def _common(self) -> dict[str, Any]:
        backend = self._lifecycle.backend
        return {"at": time.time(), "account": backend.account_id, "region": backend.region_name}

    # -- Spot capacity ----------------------------------------------------------------------------

    def launched(self, group: FakeAutoScalingGroup, instance: Instance, others: Iterable[Instance]) -> None:
        """Called for each instance a group launches: a Spot one gets its Spot request."""
        if not wants_spot(group, others):
            return
        request = _GroupSpotRequest(self._ec2, instance)
        self._ec2.spot_instance_requests[request.id] = request
        self.spot_requests[instance.id] = request
        # What DescribeInstances answers for a Spot instance (moto serializes the model's attributes).
        instance.spot_instance_request_id = request.id  # type: ignore[attr-defined]
        instance.instance_lifecycle = "spot"  # type: ignore[attr-defined]
        instance.lifecycle = "spot"

    def interrupt_spot(self, instance_id: str, *, warning_seconds: float, hook_after: float) -> None:
        lifecycle = self._lifecycle
        with lifecycle.lock:
            request = self.spot_requests.get(instance_id)
            if request is None:
                raise ValueError(f"Instance {instance_id} is not a Spot instance of a group")
            if request.status["Code"] != "fulfilled":
                raise ValueError(f"Spot instance {instance_id} is {request.status['Code']} already")
            instance = self._ec2.get_instance(instance_id)
            request.mark(
                MARKED,
                "Your Spot Instance has been marked for termination because there is no longer enough Spot "
                "capacity available.",
            )
            self._publish(
                ec2_events.spot_interruption_warning(
                    **self._common(), zone=instance.placement.zone, instance_id=instance_id
                )
            )
            if instance_id not in self._recommended:
                # "It is not always possible for Amazon EC2 to send the rebalance recommendation signal before the
                # two-minute Spot Instance interruption notice. Therefore, the rebalance recommendation signal can
                # arrive along with the two-minute interruption notice" (EC2 User Guide, rebalance
                # recommendations); Auto Scaling's guide: EC2 always gives both before it interrupts an instance
                self._recommend(instance_id)
            now = time.time()
            lifecycle.call_at(now + hook_after, lambda: self._hook_learns(instance_id))
            lifecycle.call_at(now + warning_seconds, lambda: self._reclaim(instance_id))

    def _hook_learns(self, instance_id: str) -> None:
        """Auto Scaling learns of the interruption: the instance leaves through the terminate hooks (and is
        replaced), while EC2's clock keeps running."""
        lifecycle = self._lifecycle
        with lifecycle.lock:
            found = lifecycle.find_state(instance_id)
            if found is None:
                return
            group, state = found
            lifecycle.begin_terminate(group, state, "spot-interruption")
            group.set_desired_capacity(group.desired_capacity)

    def _reclaim(self, instance_id: str) -> None:
        """The two minutes are over: EC2 terminates the instance, whatever its hooks say."""
        lifecycle = self._lifecycle
        with lifecycle.lock:
            request = self.spot_requests[instance_id]
            request.mark(
                "instance-terminated-no-capacity",
                "Your Spot Instance was terminated because there is no Spot capacity available.",
                state="closed",
            )
            found = lifecycle.find_state(instance_id)
            if found is not None:
                group, state = found
                lifecycle.terminate_now(group, state)  # (which tells of the state changes)
                group.set_desired_capacity(group.desired_capacity)
            elif self._ec2.get_instance(instance_id).state not in ("shutting-down", "terminated"):
                self._ec2.terminate_instances([instance_id])
                self.state_changed([instance_id], ("shutting-down", "terminated"))

    def recommend_rebalance(self, instance_id: str) -> None:
        lifecycle = self._lifecycle
        with lifecycle.lock:
            if instance_id not in self.spot_requests:
                raise ValueError(f"Instance {instance_id} is not a Spot instance of a group")
            self._recommend(instance_id)

    def _recommend(self, instance_id: str) -> None:
        """EC2's rebalance recommendation of a Spot instance, and Capacity Rebalancing's replacement of it when
        its group has it on. (Under the lock.)"""
        self._recommended.add(instance_id)
        instance = self._ec2.get_instance(instance_id)
        self._publish(
            ec2_events.rebalance_recommendation(
                **self._common(), zone=instance.placement.zone, instance_id=instance_id
            )
        )
        found = self._lifecycle.find_state(instance_id)
        if found is not None and found[0].capacity_rebalance:
            self._replace_at_risk(*found)

    def _replace_at_risk(self, group: FakeAutoScalingGroup, state: InstanceState) -> None:
        """Capacity Rebalancing: Auto Scaling launches a replacement of the at-risk instance and "waits until the
        new instance passes its health checks before it proceeds with terminating the previous instance" (Auto
        Scaling User Guide, Capacity Rebalancing), through its terminate hooks. (Under the lock.)"""
        lifecycle = self._lifecycle
        if state.lifecycle_state != "InService" or state.instance.id in self._replacing:
            return  # (already on its way out, or not yet in, or being replaced: nothing more to launch)
        self._replacing.add(state.instance.id)
        replacement = lifecycle.run_instance(group)
        group.instance_states.append(replacement)
        lifecycle.launched(group, replacement)
        self._when_in_service(group, state, replacement)

    def _when_in_service(self, group: FakeAutoScalingGroup, old: InstanceState, new: InstanceState) -> None:
        """Terminate ``old`` once ``new`` is in service (looked at every REBALANCE_LOOK_SECONDS); nothing when
        ``new`` is gone first (its launch abandoned) or ``old`` left meanwhile (interrupted, scaled in)."""
        lifecycle = self._lifecycle
        if new not in group.instance_states or old not in group.instance_states:
            return
        if new.lifecycle_state != "InService":
            lifecycle.call_at(time.time() + REBALANCE_LOOK_SECONDS, lambda: self._look_again(group, old, new))
            return
        lifecycle.begin_terminate(group, old, "capacity-rebalance")

    def _look_again(self, group: FakeAutoScalingGroup, old: InstanceState, new: InstanceState) -> None:
        with self._lifecycle.lock:
            self._when_in_service(group, old, new)

    # -- scheduled events -------------------------------------------------------------------------

    def schedule_maintenance(
        self,
        instance_ids: list[str],
        *,
        code: str,
        starts_in: float,
        duration: float,
        deadline_in: float | None = None,
    ) -> None:
        if code not in ec2_events.HEALTH_CODES:
            raise ValueError(f"Unknown scheduled event code {code}: one of {sorted(ec2_events.HEALTH_CODES)}")
        with self._lifecycle.lock:
            now = time.time()
            starts, ends = now + starts_in, now + starts_in + duration
            told = ec2_events.health_scheduled_change(
                **self._common(), instance_ids=list(instance_ids), code=code, starts=starts, ends=ends
            )
            arn = told["detail"]["eventArn"]
            self._health_told[arn] = _Told(instances=list(instance_ids), code=code, starts=starts, ends=ends)
            for instance_id in instance_ids:
                instance = self._ec2.get_instance(instance_id)
                events = list(getattr(instance, "events", None) or [])
                event_id = f"instance-event-{uuid.uuid4().hex[:17]}"
                self._health_arns[event_id] = arn
                events.append(
                    {
                        "InstanceEventId": event_id,
                        "Code": code,
                        "Description": ec2_events.DESCRIPTIONS[code],
                        "NotBefore": datetime.fromtimestamp(starts, tz=UTC),
                        "NotAfter": datetime.fromtimestamp(ends, tz=UTC),
                        # (only an event with a deadline may be moved, up to it: see reschedule_maintenance)
                        **(
                            {}
                            if deadline_in is None
                            else {"NotBeforeDeadline": datetime.fromtimestamp(now + deadline_in, tz=UTC)}
                        ),
                    }
                )
                # DescribeInstanceStatus answers the model's events (moto serializes its attributes).
                instance.events = events
            self._publish(told)

    def reschedule_maintenance(self, instance_ids: list[str], *, starts_in: float) -> None:
        """The instances' first pending scheduled event moved to start ``starts_in`` seconds from now, its window as
        long as before, as EC2's ModifyInstanceEventStartTime moves it (a customer's reschedule: EC2 User Guide,
        "Reschedule a scheduled event for an EC2 instance"), which moto lacks. EC2 refuses to move an event that has
        begun, one that has no deadline (NotBeforeDeadline: "only events with an event deadline date can be
        rescheduled"), and a new start past that deadline; its other bounds (a new start at least 60 minutes ahead,
        none within 5 minutes of the event's start) are not held to, so that a test need not wait an hour. No AWS
        Health event tells of the move (AWS documents none): only EC2's listing does."""
        with self._lifecycle.lock:
            now = datetime.fromtimestamp(time.time(), tz=UTC)
            for instance_id in instance_ids:
                instance, events, first = self._first_pending(instance_id)
                if first["NotBefore"] <= now:
                    raise ValueError(
                        f"The scheduled event of {instance_id} has begun: it cannot be rescheduled"
                    )
                deadline = first.get("NotBeforeDeadline")
                if deadline is None:
                    raise ValueError(
                        f"The scheduled event of {instance_id} has no deadline (NotBeforeDeadline): it cannot be "
                        "rescheduled"
                    )
                starts = datetime.fromtimestamp(time.time() + starts_in, tz=UTC)
                if starts > deadline:
                    raise ValueError(
                        f"The scheduled event of {instance_id} cannot be rescheduled past its deadline {deadline}"
                    )
                moved = {
                    **first,
                    "NotBefore": starts,
                    "NotAfter": starts + (first["NotAfter"] - first["NotBefore"]),
                }
                instance.events = [moved if e is first else e for e in events]

    def _first_pending(self, instance_id: str) -> tuple[Any, list[dict[str, Any]], dict[str, Any]]:
        """The instance, its scheduled events, and the first of them not ended yet (ValueError: none is)."""
        instance = self._ec2.get_instance(instance_id)
        events = list(getattr(instance, "events", None) or [])
        pending = [e for e in events if not e["Description"].startswith(ENDED)]
        if not pending:
            raise ValueError(f"Instance {instance_id} has no pending scheduled event")
        return instance, events, min(pending, key=lambda e: e["NotBefore"])

    def end_maintenance(self, instance_ids: list[str], *, canceled: bool = False) -> None:
        with self._lifecycle.lock:
            for instance_id in instance_ids:
                instance, events, first = self._first_pending(instance_id)
                mark = "[Canceled]" if canceled else "[Completed]"
                instance.events = [
                    {**e, "Description": f"{mark} {e['Description']}"} if e is first else e for e in events
                ]
                if not canceled and first["Code"] in GOING_CODES and instance.state == "running":
                    self._ec2.stop_instances([instance_id])
                    self.state_changed([instance_id], ("stopping", "stopped"))
                if not canceled and first["Code"] in REBOOT_CODES and instance.state == "running":
                    lifecycle = self._lifecycle
                    lifecycle.instance_rebooted(instance_id, boot=lifecycle.boot_seconds)
                self._publish(self._health_update(instance_id, first))

    def _health_update(self, instance_id: str, ended: dict[str, Any]) -> dict[str, Any]:
        """AWS Health's update of the event that told of ``ended``, the scheduled event of ``instance_id`` just
        carried out or called off: the event again, under its ARN, naming all its instances, this one's part
        RESOLVED; closed once every instance's part is, open (or still upcoming) while others wait for theirs."""
        arn = self._health_arns.get(ended["InstanceEventId"])
        told = self._health_told.get(arn) if arn is not None else None
        if told is None:  # (an event set on the instance some other way: told as one of its own)
            told = _Told(
                instances=[instance_id],
                code=ended["Code"],
                starts=ended["NotBefore"].timestamp(),
                ends=ended["NotAfter"].timestamp(),
            )
        told.resolved.add(instance_id)
        common = self._common()
        if set(told.instances) <= told.resolved:
            status = "closed"
        else:
            status = "open" if common["at"] >= told.starts else "upcoming"
        return ec2_events.health_scheduled_change(
            **common,
            instance_ids=told.instances,
            code=told.code,
            starts=told.starts,
            ends=told.ends,
            status=status,
            event_arn=arn,
            resolved=frozenset(told.resolved),
        )

    # -- state changes outside the hooks --------------------------------------------------------

    def state_changed(self, instance_ids: Iterable[str], states: Iterable[str]) -> None:
        """EC2's state-change notifications, one per instance and state, in order."""
        ordered = list(states)
        with self._lifecycle.lock:
            for instance_id in instance_ids:
                for state in ordered:
                    self._publish(
                        ec2_events.state_change(**self._common(), instance_id=instance_id, state=state)
                    )
                if "stopped" in ordered:
                    self._lifecycle.instance_stopped(instance_id)
