"""What happened, kept for tests and benchmarks: lifecycle actions, instances and instance refreshes.

Every record is a plain picklable dataclass with epoch-second timestamps, so it crosses the pipe from the
AWS process unchanged and can be compared with times measured in any other process.
"""

from __future__ import annotations

from dataclasses import dataclass, field

LAUNCHING = "autoscaling:EC2_INSTANCE_LAUNCHING"
TERMINATING = "autoscaling:EC2_INSTANCE_TERMINATING"
TRANSITIONS = (LAUNCHING, TERMINATING)
RESULTS = ("CONTINUE", "ABANDON")
# Where an instance comes from and goes to in a lifecycle action (its events' Origin and Destination).
EC2 = "EC2"
GROUP = "AutoScalingGroup"
WARM_POOL = "WarmPool"
# The Action its events carry for an instance refresh's root volume replacement (strategy ReplaceRootVolume): the
# terminating hooks' action before it (Origin and Destination both the group, in ReplacingRootVolume:Wait), the
# launching hooks' after it (in Pending:Wait). "Instance refresh replace root volume lifecycle events", Amazon EC2
# Auto Scaling user guide.
REPLACE_ROOT_VOLUME = "ReplaceRootVolume"


@dataclass
class ActionRecord:
    """One lifecycle action: an instance held by one hook for one transition."""

    token: str
    group: str
    hook: str
    instance_id: str
    transition: str
    default_result: str
    heartbeat_timeout: float
    global_timeout: float
    started_at: float
    # Where the instance comes from and goes to: EC2, AutoScalingGroup or WarmPool (as its events say).
    origin: str = ""
    destination: str = ""
    # The Action its EventBridge event carries: REPLACE_ROOT_VOLUME for a root volume replacement's; empty otherwise
    action: str = ""
    heartbeats: list[float] = field(default_factory=list)
    heartbeat_callers: list[str] = field(default_factory=list)  # who recorded each of ``heartbeats``
    finished_at: float | None = None
    result: str | None = None
    # "completed" (by an API call), "heartbeat-timeout", "global-timeout", "hook-deleted" (completed by
    # DeleteLifecycleHook) or "cancelled" (the instance went away before the action ended, e.g. a group
    # deletion, or another hook's ABANDON at terminate).
    outcome: str | None = None
    completed_by: str | None = None
    # Calls that named this action after it had ended: (time, caller, operation). AWS answers them with
    # "No active Lifecycle Action found"; tests assert that such late calls are harmless.
    late_calls: list[tuple[float, str, str]] = field(default_factory=list)

    @property
    def active(self) -> bool:
        return self.finished_at is None

    @property
    def global_deadline(self) -> float:
        return self.started_at + self.global_timeout

    @property
    def deadline(self) -> float:
        """When the action times out if nobody completes it or records a heartbeat."""
        last_beat = self.heartbeats[-1] if self.heartbeats else self.started_at
        return min(last_beat + self.heartbeat_timeout, self.global_deadline)


@dataclass
class InstanceHistory:
    """The life of one instance of a group, as the emulation drove it."""

    instance_id: str
    group: str
    zone: str
    node_name: str
    launched_at: float
    in_service_at: float | None = None
    terminate_started_at: float | None = None
    terminated_at: float | None = None
    # Why the instance left: "scale-in", "user-request", "instance-refresh", "launch-abandoned", ...
    termination_cause: str | None = None
    # Times the instance went into its group's warm pool (launched into it, or scaled in to it) and left it.
    pool_entered_at: list[float] = field(default_factory=list)
    pool_left_at: list[float] = field(default_factory=list)
    # Times an instance refresh replaced its root volume (the instance rebooted on the new one, its kubelet gone)
    root_volume_replaced_at: list[float] = field(default_factory=list)
    # Times EC2 rebooted it for a scheduled reboot it carried out (its kubelet gone, back on a new boot)
    rebooted_at: list[float] = field(default_factory=list)


@dataclass
class RefreshBatch:
    started_at: float
    instance_ids: list[str]


@dataclass
class RefreshTimeline:
    """An instance refresh: its batches and the history of every instance it replaced or launched."""

    refresh_id: str
    group: str
    status: str
    min_healthy_percentage: int
    instance_warmup: float
    batch_size: int
    started_at: float
    finished_at: float | None
    batches: list[RefreshBatch]
    instances_to_replace: list[str]
    instances: dict[str, InstanceHistory]

    @property
    def duration(self) -> float | None:
        return None if self.finished_at is None else self.finished_at - self.started_at


@dataclass(frozen=True)
class Notification:
    """A message the emulation sent: to EventBridge (target "eventbridge") or to an SQS queue ARN."""

    sent_at: float
    target: str
    payload: dict[str, object]
