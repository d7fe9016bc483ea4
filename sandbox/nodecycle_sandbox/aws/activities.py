"""The scaling activities of the emulated groups, and DescribeScalingActivities over them (moto answers none).

What AWS documents (DescribeScalingActivities, Amazon EC2 Auto Scaling API reference; botocore's autoscaling model;
"Verify a scaling activity for an Auto Scaling group", user guide): an activity per instance launched or terminated,
its Description "Launching a new EC2 instance: i-..." or "Terminating EC2 instance: i-...", its StartTime when the
group began it (before any lifecycle hook holds the instance: the hook's action starts inside it), its StatusCode
MidLifecycleAction while a hook holds the instance, then Successful (or Cancelled) with an EndTime. Answers are
"ordered by start time. Activities still in progress are described first", newest first; only activities started in
the last six weeks are listed; MaxRecords is 1 to 100 (100 by default), with a NextToken for the next page;
ActivityIds (at most 50; unknown ones ignored), the filters StartTimeLowerBound, StartTimeUpperBound (ISO 8601,
UTC when no offset is given) and Status (only with AutoScalingGroupName); a deleted group's activities only with
IncludeDeletedGroups."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from moto.autoscaling.exceptions import ValidationError

MAX_RECORDS = 100
MAX_ACTIVITY_IDS = 50
RETENTION = timedelta(weeks=6)
LAUNCHING = "Launching a new EC2 instance: {}"
TERMINATING = "Terminating EC2 instance: {}"
_FILTERS = ("StartTimeLowerBound", "StartTimeUpperBound", "Status")


@dataclass
class ScalingActivity:
    """One activity of a group: an instance launched into it, or terminated from it."""

    group: str
    group_arn: str
    instance_id: str
    description: str
    cause: str
    zone: str
    started_at: float
    activity_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    ended_at: float | None = None
    status: str | None = None  # once ended: Successful or Cancelled; while open, told by the instance's state

    def describe(self, lifecycle_state: str | None, group_deleted: bool) -> dict[str, Any]:
        if self.status is not None:
            status, progress = self.status, 100
        elif lifecycle_state is not None and lifecycle_state.endswith(":Wait"):
            status, progress = "MidLifecycleAction", 50
        else:
            status, progress = "InProgress", 50
        answer: dict[str, Any] = {
            "ActivityId": self.activity_id,
            "AutoScalingGroupName": self.group,
            "AutoScalingGroupARN": self.group_arn,
            "Description": self.description.format(self.instance_id),
            "Cause": self.cause,
            "StartTime": datetime.fromtimestamp(self.started_at, tz=UTC),
            "StatusCode": status,
            "Progress": progress,
            "Details": f'{{"Availability Zone":"{self.zone}"}}',
            "AutoScalingGroupState": "Deleted" if group_deleted else "InService",
        }
        if self.ended_at is not None:
            answer["EndTime"] = datetime.fromtimestamp(self.ended_at, tz=UTC)
        return answer


@dataclass(frozen=True)
class ActivityQuery:
    """A DescribeScalingActivities request, as its parameters came."""

    group: str | None
    activity_ids: Sequence[str]
    include_deleted: bool
    max_records: str | None
    next_token: str | None
    filters: Sequence[dict[str, Any]]


def _time(value: str) -> float:
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValidationError(f"Invalid timestamp in filter: {value}") from None
    return (moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)).timestamp()


def _filtering(query: ActivityQuery) -> Callable[[ScalingActivity, str], bool]:
    """The test the query's filters make of an activity and its status."""
    lower, upper, statuses = None, None, None
    for item in query.filters:
        name, values = item.get("Name"), list(item.get("Values") or [])
        if name not in _FILTERS:
            raise ValidationError(f"Filter type {name} is not supported.")
        if name == "Status":
            if query.group is None:
                raise ValidationError("Status filter can only be used with AutoScalingGroupName.")
            statuses = set(values)
        elif len(values) != 1:
            raise ValidationError(f"Filter {name} takes exactly one value.")
        elif name == "StartTimeLowerBound":
            lower = _time(values[0])
        else:
            upper = _time(values[0])

    def matches(activity: ScalingActivity, status: str) -> bool:
        return (
            (lower is None or activity.started_at >= lower)
            and (upper is None or activity.started_at <= upper)
            and (statuses is None or status in statuses)
        )

    return matches


def describe_activities(
    activities: Sequence[ScalingActivity],
    query: ActivityQuery,
    now: float,
    state_of: Callable[[str], str | None],
    group_exists: Callable[[str], bool],
) -> dict[str, Any]:
    """One page of DescribeScalingActivities: the activities the query selects, in progress first, each part
    newest first; ``state_of`` an instance's lifecycle state (None: no group lists it)."""
    size = MAX_RECORDS if query.max_records is None else int(query.max_records)
    if not 1 <= size <= MAX_RECORDS:
        raise ValidationError(
            f"Value '{size}' at 'maxRecords' failed to satisfy constraint: Member must have value less than or "
            f"equal to {MAX_RECORDS}"
        )
    if len(query.activity_ids) > MAX_ACTIVITY_IDS:
        raise ValidationError(
            f"Value at 'activityIds' failed to satisfy constraint: Member must have length less than or equal to "
            f"{MAX_ACTIVITY_IDS}"
        )
    matches = _filtering(query)
    chosen: list[dict[str, Any]] = []
    for activity in activities:
        deleted = not group_exists(activity.group)
        if (
            now - activity.started_at > RETENTION.total_seconds()
            or (query.group is not None and activity.group != query.group)
            or (query.activity_ids and activity.activity_id not in query.activity_ids)
            or (deleted and not query.include_deleted)
        ):
            continue
        described = activity.describe(state_of(activity.instance_id), deleted)
        if matches(activity, described["StatusCode"]):
            chosen.append(described)
    chosen.sort(key=lambda a: ("EndTime" in a, -a["StartTime"].timestamp()))
    start = 0
    if query.next_token:
        if not query.next_token.isdigit() or int(query.next_token) > len(chosen):
            raise ValidationError(f"The token '{query.next_token}' is invalid.")
        start = int(query.next_token)
    end = start + size
    page: dict[str, Any] = {"Activities": chosen[start:end]}
    if end < len(chosen):
        page["NextToken"] = str(end)
    return page
