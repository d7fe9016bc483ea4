"""The EC2 and AWS Health events of disruptions that no lifecycle hook waits for, and their normalized form.

- ``EC2 Spot Instance Interruption Warning``: EC2 reclaims a Spot instance two minutes after the event, by
  terminating it or, for a persistent request's instance, stopping or hibernating it (``instance-action``):
  EC2 starts such an instance again once capacity comes back;
- ``EC2 Instance Rebalance Recommendation``: a Spot instance is at elevated risk of interruption;
- ``EC2 Instance State-change Notification``: an instance stopping, stopped, shutting down or terminated
  (other states are not disruptions);
- ``AWS Health Event`` of category ``scheduledChange`` for EC2: maintenance (a reboot, a stop, a retirement)
  scheduled for one or more instances, starting at ``startTime`` (its update closing it: over or called off,
  nothing to act on).

All come as EventBridge events (invoking intake directly, or delivered as an SQS message body).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta
from email.utils import parsedate_to_datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from nodecycle.contracts.eventbridge import EventBridgeEnvelope
from nodecycle.contracts.lifecycle_events import INSTANCE_ID, shown, validate
from nodecycle.contracts.times import AwsTime
from nodecycle.domain.model import DisruptionEvent, Transition
from nodecycle.domain.ports.instances import DOWN_STATES

EC2_SOURCE = "aws.ec2"
HEALTH_SOURCE = "aws.health"
SPOT_WARNING = "EC2 Spot Instance Interruption Warning"
REBALANCE = "EC2 Instance Rebalance Recommendation"
STATE_CHANGE = "EC2 Instance State-change Notification"
HEALTH_EVENT = "AWS Health Event"
DETAIL_TYPES = {
    EC2_SOURCE: (SPOT_WARNING, REBALANCE, STATE_CHANGE),
    HEALTH_SOURCE: (HEALTH_EVENT,),
}
SPOT_NOTICE = timedelta(minutes=2)  # EC2 interrupts a Spot instance two minutes after its warning
# EC2's event code (DescribeInstanceStatus, InstanceStatusEvent.Code) of the maintenance each AWS Health event type
# tells of (EC2 User Guide, "Scheduled events for Amazon EC2 instances"; AWS Health event type codes)
HEALTH_EVENT_CODES = {
    "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED": "instance-retirement",
    "AWS_EC2_INSTANCE_STOP_SCHEDULED": "instance-stop",
    "AWS_EC2_INSTANCE_REBOOT_MAINTENANCE_SCHEDULED": "instance-reboot",
    "AWS_EC2_SYSTEM_REBOOT_MAINTENANCE_SCHEDULED": "system-reboot",
    "AWS_EC2_SYSTEM_MAINTENANCE_EVENT": "system-maintenance",
}


class NotADisruption(ValueError):
    """A well-formed event that tells of nothing to act on (an instance starting, a Health event that is
    not a scheduled change of EC2 instances): acknowledged and dropped, quietly."""


# defer_build: built at the first disruption taken in, not at every cold start of intake, most of whose
# invocations read lifecycle actions only (see EventBridgeEnvelope)
class _Detail(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, defer_build=True)

    instance_id: str = Field(alias="instance-id", pattern=INSTANCE_ID)


class _SpotWarning(_Detail):
    instance_action: Literal["terminate", "stop", "hibernate"] = Field(alias="instance-action")


class _StateChange(_Detail):
    state: str


# The status of an affected entity whose part of the event is over (AWS Health's entity status codes: IMPAIRED,
# UNIMPAIRED, UNKNOWN, PENDING, RESOLVED). One Health event names every affected instance of the account, each
# PENDING until its change is done or called off, RESOLVED after, while the event stays open for the others.
RESOLVED = "RESOLVED"


class _Entity(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)

    entityValue: str
    # (absent from older events and from the schema's sample retirement: as PENDING, left to EC2's listing)
    status: str | None = None


def _health_time(value: Any) -> Any:
    """AWS Health writes its times as RFC 1123 dates (``Mon, 07 Dec 2026 10:00:00 GMT``)."""
    if isinstance(value, str) and "," in value:
        try:
            return parsedate_to_datetime(value)
        # (OverflowError: a zone or a number past C's integers. Not a ValueError, which alone the model turns
        # into a refusal: raised out of it, the record would fail as if retryable, into the dead-letter queue)
        except (TypeError, ValueError, OverflowError):
            return value  # left for the model to refuse, naming the field
    return value


class _HealthDetail(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)

    service: str
    eventTypeCategory: str
    eventTypeCode: str
    startTime: Annotated[AwsTime, BeforeValidator(_health_time)]
    # upcoming, open or closed. Health sends its event again when it closes it: the maintenance is over, or was
    # called off (EC2 lists it as [Completed] or [Canceled], or no more). Absent from older events.
    statusCode: str | None = None
    affectedEntities: list[_Entity] = Field(default_factory=list)


class _Ec2Event(EventBridgeEnvelope):
    detail: dict[str, Any]


# An EC2 instance's ARN (arn:<partition>:ec2:<region>:<account>:instance/<id>), as AWS Health may name it
_INSTANCE_ARN = re.compile(r"^arn:[\w-]+:ec2:[^:]*:[^:]*:instance/(?P<id>.+)$")


def _instance_of(entity: str) -> str | None:
    """The instance an affected entity of a Health event names: its id, bare (``i-...``) or in its ARN (the schema's
    own sample of a retirement names the instance by its ARN); None for an entity that is no instance (a Dedicated
    Host, ``h-...``). (An id that is not one is refused later, naming it.)"""
    if entity.startswith("i-"):
        return entity
    found = _INSTANCE_ARN.match(entity)
    return found.group("id") if found else None


def is_disruption_event(event: Mapping[str, Any]) -> bool:
    """Whether ``event`` is one of the EventBridge events this module reads (by source and detail-type)."""
    return event.get("detail-type") in DETAIL_TYPES.get(str(event.get("source")), ())


def from_eventbridge(event: Mapping[str, Any], delivery: str = "eventbridge") -> list[DisruptionEvent]:
    """The disruptions an event tells of (one per instance). Raises :class:`InvalidLifecycleEvent` for a
    malformed event, :class:`NotADisruption` for one that tells of nothing to act on."""
    parsed = validate(_Ec2Event, event)
    kind = parsed.detail_type
    common = {
        "event_id": parsed.id,
        "happened_at": parsed.time,
        "delivery": delivery,
        "replay": parsed.replay_name,
    }
    if kind == SPOT_WARNING:
        spot = validate(_SpotWarning, parsed.detail)
        return [
            DisruptionEvent(
                instance_id=spot.instance_id,
                cause=Transition.SPOT_INTERRUPTION,
                strikes_at=parsed.time + SPOT_NOTICE,
                # (a stop or hibernation ends with the instance started again, its node to be uncordoned then)
                spot_action=spot.instance_action,
                **common,
            )
        ]
    if kind == REBALANCE:
        detail = validate(_Detail, parsed.detail)
        # No deadline: drained (if at all) under the budget, like a voluntary disruption, and never forced
        # past it (drain/common.py, _precedence). The two days are a horizon for the drain's own deadline only.
        return [
            DisruptionEvent(
                instance_id=detail.instance_id,
                cause=Transition.REBALANCE,
                strikes_at=parsed.time + timedelta(days=2),
                **common,
            )
        ]
    if kind == STATE_CHANGE:
        change = validate(_StateChange, parsed.detail)
        if change.state not in DOWN_STATES:
            raise NotADisruption(f"instance {change.instance_id} is {shown(change.state)}: not a disruption")
        return [
            DisruptionEvent(
                instance_id=change.instance_id,
                cause=Transition.STATE_CHANGE,
                strikes_at=parsed.time,
                state=change.state,
                **common,
            )
        ]
    health = validate(_HealthDetail, parsed.detail)
    if health.service != "EC2" or health.eventTypeCategory != "scheduledChange":
        raise NotADisruption(f"AWS Health event {shown(health.eventTypeCode)}: not a scheduled change of EC2")
    if health.statusCode == "closed":
        # Nothing left to drain for. Taken in, the update of a maintenance called off (its start still ahead, which
        # EC2 no longer lists) drained the node as for maintenance EC2 lists late, and that of one done (its start
        # passed) was rejected as stale: RejectedEventsAlarm paged at the end of every maintenance.
        raise NotADisruption(
            f"AWS Health event {shown(health.eventTypeCode)} closed: its maintenance is over or called off"
        )
    # An instance whose part is RESOLVED has nothing left to drain for: taken in, the update sent when one
    # instance's part ended was rejected as stale once the window had opened (EC2 lists that maintenance as
    # completed: RejectedEventsAlarm paged at every maintenance of more than one instance), and drained a node for
    # nothing before it (a part called off, told to a stack that had not taken the event in).
    named = {found for e in health.affectedEntities if (found := _instance_of(e.entityValue)) is not None}
    resolved = {
        found
        for e in health.affectedEntities
        if e.status == RESOLVED and (found := _instance_of(e.entityValue)) is not None
    }
    instances = sorted(named - resolved)
    if named and not instances:
        raise NotADisruption(
            f"AWS Health event {shown(health.eventTypeCode)}: the part of each instance it names is resolved"
        )
    if not instances:
        # AWS's own, about no instance: a Dedicated Host's maintenance names the host (h-...), a public event no
        # resource at all (Health's EventBridge schema: ``resources`` is empty then). Refused as malformed, each
        # would page (RejectedEventsAlarm) as a forged or broken message; one forged so names no node either.
        raise NotADisruption(
            f"AWS Health event {shown(health.eventTypeCode)} names no instance "
            f"(entities: {shown([e.entityValue for e in health.affectedEntities][:8])})"
        )
    for instance in instances:
        validate(_Detail, {"instance-id": instance})
    return [
        DisruptionEvent(
            instance_id=instance,
            cause=Transition.SCHEDULED_CHANGE,
            strikes_at=health.startTime,
            code=HEALTH_EVENT_CODES.get(health.eventTypeCode),
            **common,
        )
        for instance in instances
    ]
