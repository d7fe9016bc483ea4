"""EC2 instances as nodecycle needs to know them: their names (by which nodes are found), whether they live,
and the facts that confirm a disruption EC2 told of through a channel anyone could write to."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

# EC2 instance states from which an instance never takes, nor keeps, an address again.
GONE_STATES = frozenset({"shutting-down", "terminated"})
# Stopped or on its way to it: the instance may run again.
STOP_STATES = frozenset({"stopping", "stopped"})
# Either: a disruption EC2 confirms, addresses a stop gives back.
DOWN_STATES = GONE_STATES | STOP_STATES


def up(state: str | None) -> bool:
    """Whether an instance in EC2 ``state`` (None: EC2 no longer lists it) is neither down nor gone: pending
    or running (again, for a message about its stop that comes late)."""
    return state is not None and state not in DOWN_STATES


@dataclass(frozen=True)
class InstanceFacts:
    instance_id: str
    state: str  # pending, running, stopping, stopped, shutting-down, terminated
    group: str | None  # the Auto Scaling group it belongs to (its aws:autoscaling:groupName tag)
    tags: dict[str, str]
    spot_request: str | None  # the Spot request of a Spot instance; None for On-Demand


@dataclass(frozen=True)
class ScheduledEvent:
    """A maintenance EC2 has scheduled for an instance and not yet carried out nor called off."""

    code: str  # instance-reboot, system-reboot, system-maintenance, instance-retirement, instance-stop
    not_before: datetime
    not_after: datetime | None = None  # the end of its window (a stop or retirement has none)


class Instances(Protocol):
    def private_dns_name(self, instance_id: str) -> str | None:
        """The instance's private DNS name; None when the instance is unknown."""
        ...

    def alive(self, instance_ids: Collection[str]) -> set[str]:
        """The instances among ``instance_ids`` that exist and are not shutting down or terminated."""
        ...

    def states(self, instance_ids: Collection[str]) -> dict[str, str]:
        """Instance id -> EC2 state, for those of ``instance_ids`` EC2 still knows (batched calls)."""
        ...

    def last_started(self, instance_id: str) -> datetime | None:
        """When EC2 last started the instance: its ``LaunchTime``, "the time that the instance was last launched",
        which each start out of the stopped state (a warm pool's Stopped or Hibernated instance taken out) moves
        on, as one DescribeInstances answer that shows the instance up (pending or running) tells it. None when EC2
        does not know the instance, or shows it down: an answer that lags the start (eventual consistency) shows
        the stop, and the ``LaunchTime`` from before it with it."""
        ...


class ScheduledEvents(Protocol):
    def scheduled_events(self, instance_id: str) -> list[ScheduledEvent]:
        """The maintenance events EC2 has scheduled for the instance and not carried out nor called off
        (DescribeInstanceStatus)."""
        ...


class MaintainedInstances(ScheduledEvents, Protocol):
    """What the cleanup after a maintenance drain asks of EC2: whether the maintenance can still come, and
    whether the instance is still there once it is over."""

    def states(self, instance_ids: Collection[str]) -> dict[str, str]:
        """Instance id -> EC2 state, for those of ``instance_ids`` EC2 still knows (batched calls)."""
        ...


class InstanceDirectory(ScheduledEvents, Protocol):
    """What intake asks of EC2 about the instance of a disruption event."""

    def facts(self, instance_id: str) -> InstanceFacts | None:
        """What EC2 says of the instance now; None when it does not know it."""
        ...

    def facts_of(self, instance_ids: Collection[str]) -> dict[str, InstanceFacts]:
        """What EC2 says now of those of ``instance_ids`` it knows, in as few calls as it allows."""
        ...

    def spot_interruption_noticed(self, spot_request: str) -> bool:
        """Whether EC2 has marked the Spot request's instance for interruption (its status code says so)."""
        ...
