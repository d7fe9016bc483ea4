"""PutEvents refusing the sources reserved for AWS, as EventBridge does.

An event whose ``Source`` begins with ``aws.`` comes from an AWS service; EventBridge refuses it from any
caller of PutEvents, whatever its permissions, each such entry failed with ``NotAuthorizedForSourceException``
("You do not have permissions to publish events with this source onto this event bus", PutEventsResultEntry,
EventBridge API reference) and counted in ``FailedEntryCount``, the other entries of the request put. moto put
it on the bus like any other. In the sandbox the AWS side's own events (lifecycle actions, EC2 state changes,
Spot warnings, Health) reach the rules through the emulation (``Sandbox.publish``), never through PutEvents: so
an operator who puts a dead-lettered ``aws.autoscaling`` event back with ``aws events put-events`` is refused
here as on AWS, and only the intake queue takes it back (the runbook's redrive).
"""

from __future__ import annotations

from typing import Any

from moto.events.models import EventsBackend

RESERVED_PREFIX = "aws."
MAX_ENTRIES = 10
NOT_AUTHORIZED = {
    "ErrorCode": "NotAuthorizedForSourceException",
    "ErrorMessage": "You do not have permissions to publish events with this source onto this event bus.",
}

_MARKER = "_nodecycle_sandbox_sources"


def install() -> None:
    """Idempotent: a second call changes nothing."""
    if getattr(EventsBackend, _MARKER, False):
        return
    put_events = EventsBackend.put_events

    def checked(self: EventsBackend, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if len(events) > MAX_ENTRIES:
            return put_events(self, events)  # moto's ValidationException for the whole request
        allowed = [e for e in events if not _reserved(e)]
        answers = iter(put_events(self, allowed) if allowed else [])
        return [dict(NOT_AUTHORIZED) if _reserved(e) else next(answers) for e in events]

    EventsBackend.put_events = checked  # type: ignore[method-assign]
    setattr(EventsBackend, _MARKER, True)


def _reserved(entry: dict[str, Any]) -> bool:
    return str(entry.get("Source") or "").startswith(RESERVED_PREFIX)
