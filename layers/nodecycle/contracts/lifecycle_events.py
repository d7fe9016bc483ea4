"""Every shape in which AWS delivers a lifecycle action, and their one normalized form.

- EventBridge: ``EC2 Instance-launch Lifecycle Action`` / ``EC2 Instance-terminate Lifecycle Action``,
  invoking the intake function directly or delivered as an SQS message body by an SQS target;
- a hook whose notification target is an SQS queue: a flat JSON body (``Service: "AWS Auto Scaling"``);
- ``autoscaling:TEST_NOTIFICATION``, sent to a queue when a hook is created: acknowledged and dropped; so are a
  group's scaling notifications (``autoscaling:EC2_INSTANCE_LAUNCH``...), which a topic the queue subscribes to may
  bring beside its hook's (see :mod:`.events`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from nodecycle.contracts.eventbridge import EventBridgeEnvelope
from nodecycle.contracts.times import AwsTime
from nodecycle.domain.model import LifecycleEvent, Transition

SOURCE = "aws.autoscaling"
DETAIL_TYPES = {
    "EC2 Instance-launch Lifecycle Action": Transition.LAUNCHING,
    "EC2 Instance-terminate Lifecycle Action": Transition.TERMINATING,
}
TEST_NOTIFICATION = "autoscaling:TEST_NOTIFICATION"
# What a group's notification configuration sends (PutNotificationConfiguration, to SNS topics only): news of a
# launch or a termination, or of its failure, no action to take. On the intake queue by a topic it subscribes to
# that also carries a hook's notifications; rejected, each would page (RejectedEventsAlarm) for Auto Scaling's news.
SCALING_NOTIFICATIONS = (
    "autoscaling:EC2_INSTANCE_LAUNCH",
    "autoscaling:EC2_INSTANCE_LAUNCH_ERROR",
    "autoscaling:EC2_INSTANCE_TERMINATE",
    "autoscaling:EC2_INSTANCE_TERMINATE_ERROR",
)

INSTANCE_ID = r"^i-[0-9a-f]{8,17}$"
_TOKEN = (
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"  # a UUID, as AWS issues
)


_SHOWN = 200  # characters of a refused value that its error shows


def shown(value: object) -> str:
    """``value`` as a log line quotes it: its repr, cut to _SHOWN characters (saying how long it was) when longer.
    Anyone allowed to send to the intake queue writes what a refusal quotes, as long as a message can be: quoted
    whole, a line would be as long, past what CloudWatch Logs keeps of an event (256 KB), and cut, the JSON of the
    structured line with it (its reason, its message id)."""
    text = repr(value)
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN]}... ({len(text)} characters)"


def keys_of(data: Mapping[str, Any]) -> str:
    """The first keys of an object of no known shape, as an error names them (each ``shown``)."""
    return f"[{', '.join(shown(key) for key in sorted(data)[:8])}]"


class InvalidLifecycleEvent(ValueError):
    """The input is not a lifecycle action nodecycle can act on. ``reason`` is a short metric dimension."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class TestNotification(BaseModel):
    """Sent once to an SQS target when a hook is created. Carries no action: nothing to do. (A group's scaling
    notification, ``SCALING_NOTIFICATIONS``, carries none either, and is taken as one.)"""

    # defer_build: sent once, when a hook is created; not worth building at every cold start
    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)

    Event: Literal[
        "autoscaling:TEST_NOTIFICATION",
        "autoscaling:EC2_INSTANCE_LAUNCH",
        "autoscaling:EC2_INSTANCE_LAUNCH_ERROR",
        "autoscaling:EC2_INSTANCE_TERMINATE",
        "autoscaling:EC2_INSTANCE_TERMINATE_ERROR",
    ]
    Service: str
    # (as Auto Scaling lets a group's name be: this one is logged, see shown)
    AutoScalingGroupName: str = Field(max_length=255)
    Time: AwareDatetime | None = None
    RequestId: str | None = None


def _metadata_text(value: object) -> object:
    """A hook's NotificationMetadata as text, however its event carries it. EventBridge carries metadata that is a
    JSON object as that object, not as its text (rules match keys inside it; handlers index it), a hook's
    notification on a queue as the text: either is the same metadata, kept as compact JSON text. nodecycle reads
    nothing in it: refused, the action of every hook with JSON metadata was dropped as invalid, its node drained
    only once the sweeper adopted the action. (Anything JSON cannot write back is left for the model to refuse.)"""
    if value is None or isinstance(value, str):
        return value
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return value


class _LifecycleFields(BaseModel):
    """The fields of a lifecycle action, common to both delivery shapes."""

    # defer_build (inherited by HookNotification): an invocation reads hook notifications from the queue or
    # EventBridge events, rarely both, and builds the model of the one it reads (see EventBridgeEnvelope)
    # No whitespace stripped: Auto Scaling lets a group's name begin or end with spaces (its API model's
    # ResourceName: any XML character, 1 to 1,600), and "ng " is another group than "ng" (another stack's, or
    # none's), read as it would be taken in as this stack's. What AWS writes comes as AWS wrote it; a token or an
    # instance id padded with spaces is not AWS's, and its pattern refuses it.
    model_config = ConfigDict(extra="ignore", defer_build=True)

    # Each free-text field as long as Auto Scaling lets it be (names of 255 characters, metadata of 1,023;
    # origins and destinations are short words): what the queue takes (1 MiB) can outgrow the record's item
    # (400 KB), a write that would fail the same way at every retry until the dead-letter queue.
    LifecycleActionToken: str = Field(pattern=_TOKEN)
    AutoScalingGroupName: str = Field(min_length=1, max_length=255)
    LifecycleHookName: str = Field(min_length=1, max_length=255)
    EC2InstanceId: str = Field(pattern=INSTANCE_ID)
    LifecycleTransition: Transition
    # (its text at most as long as Auto Scaling lets it be, JSON carried as a value included: see _metadata_text)
    NotificationMetadata: Annotated[str | None, BeforeValidator(_metadata_text)] = Field(
        None, max_length=1023
    )
    Origin: str | None = Field(None, max_length=255)
    Destination: str | None = Field(None, max_length=255)

    @field_validator("LifecycleTransition")
    @classmethod
    def _a_hooks_transition(cls, transition: Transition) -> Transition:
        # The disruptions nobody chose have names of nodecycle's own, never an Auto Scaling hook's: a hook-shaped
        # message naming one is forged or broken, and would skip the action's check with Auto Scaling.
        if not transition.has_hook:
            raise ValueError("not a lifecycle hook's transition")
        return transition

    def normalized(self, started_at: datetime, delivery: str) -> LifecycleEvent:
        return LifecycleEvent(
            instance_id=self.EC2InstanceId,
            transition=self.LifecycleTransition,
            token=self.LifecycleActionToken,
            group=self.AutoScalingGroupName,
            hook=self.LifecycleHookName,
            started_at=started_at,
            origin=self.Origin,
            destination=self.Destination,
            notification_metadata=self.NotificationMetadata,
            delivery=delivery,
        )


class HookNotification(_LifecycleFields):
    """The body a hook targeted directly at an SQS queue sends."""

    Service: Literal["AWS Auto Scaling"]
    Time: AwsTime  # a time without its zone cannot be set against the hook's deadlines
    # (bounded as every free-text field: and so read as text, a lone surrogate refused by the field's name, as the
    # whitespace stripping once did for them; see tests/functions/intake/test_rintake_deliveries.py)
    RequestId: str | None = Field(None, max_length=255)
    AccountId: str | None = Field(None, max_length=255)


class LifecycleActionEvent(EventBridgeEnvelope):
    """An EventBridge lifecycle action event."""

    detail: _LifecycleFields


def from_eventbridge(event: Mapping[str, Any], delivery: str = "eventbridge") -> LifecycleEvent:
    source = event.get("source")
    if source != SOURCE:
        raise InvalidLifecycleEvent("wrong-source", f"source is {shown(source)}, expected {SOURCE!r}")
    detail_type = event.get("detail-type")
    expected = DETAIL_TYPES.get(str(detail_type))
    if expected is None:
        raise InvalidLifecycleEvent(
            "unsupported-detail-type", f"detail-type {shown(detail_type)} is not a lifecycle action"
        )
    parsed = validate(LifecycleActionEvent, event)
    if parsed.detail.LifecycleTransition is not expected:
        raise InvalidLifecycleEvent(
            "unknown-transition",
            f"LifecycleTransition {parsed.detail.LifecycleTransition} does not match detail-type {detail_type!r}",
        )
    return parsed.detail.normalized(parsed.time, delivery)


def load_json(body: str) -> Any:
    """The message body's JSON; :class:`InvalidLifecycleEvent` for anything the parser cannot read, nesting
    too deep for it included (a RecursionError would otherwise fail the record as if it were retryable)."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise InvalidLifecycleEvent("malformed-json", f"body is not JSON: {error}") from None


def from_sqs_data(
    data: Any, eventbridge_delivery: str = "sqs-eventbridge"
) -> LifecycleEvent | TestNotification:
    """A message body already read as JSON: a hook notification, a test notification, or a lifecycle action
    that an EventBridge rule with an SQS target delivered (``eventbridge_delivery``: or another way by the
    queue, see :mod:`.events`)."""
    if not isinstance(data, dict):
        raise InvalidLifecycleEvent("unknown-shape", f"body is a JSON {type(data).__name__}, not an object")
    if "detail-type" in data or "source" in data:
        return from_eventbridge(data, delivery=eventbridge_delivery)
    if data.get("Event") == TEST_NOTIFICATION or data.get("Event") in SCALING_NOTIFICATIONS:
        return validate(TestNotification, data)
    if data.get("Service") == "AWS Auto Scaling" or "LifecycleTransition" in data:
        parsed = validate(HookNotification, data)
        return parsed.normalized(parsed.Time, "sqs")
    raise InvalidLifecycleEvent(
        "unknown-shape",
        f"body is neither an EventBridge event nor a hook notification (keys: {keys_of(data)})",
    )


def validate[M: BaseModel](model: type[M], data: Mapping[str, Any]) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise _invalid(error) from None


def _invalid(error: ValidationError) -> InvalidLifecycleEvent:
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"])
    name = str(first["loc"][-1]) if first["loc"] else ""
    if first["type"] == "missing":
        return InvalidLifecycleEvent("missing-field", f"{field} is missing")
    if name == "LifecycleTransition":
        return InvalidLifecycleEvent(
            "unknown-transition",
            f"{field} {shown(first.get('input'))} is not a lifecycle hook's transition (launching or terminating)",
        )
    # (a field refused for its length would fill the log line: see shown)
    return InvalidLifecycleEvent(
        "invalid-field", f"{field}: {first['msg']} (got {shown(first.get('input'))})"
    )
