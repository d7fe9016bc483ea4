"""What kube-apiserver checks of a core/v1 Event: its legacy validation, the only one core/v1 applies (kubernetes
``pkg/apis/core/validation/events.go``: ``ValidateEventCreate`` and ``legacyValidateEvent``; the strict rules are
events.k8s.io/v1's, which the sandbox does not serve).

An Event without ``eventTime`` (as the kubelet and nodecycle write them) must be in its object's namespace, or in
``default`` for an object without one (a node). One with ``eventTime`` must also say who reported what: a
``reportingComponent`` (a qualified name), a ``reportingInstance``, an ``action`` and a ``reason`` of at most
128 bytes, and a message of at most 1024 (Go's ``len``: bytes, though its messages say characters).
"""

from __future__ import annotations

from nodecycle_sandbox.kube.meta import JsonObj
from nodecycle_sandbox.kube.object_meta import qualified_name_problem

LENGTH_LIMIT = 128  # reportingInstance, action, reason
NOTE_LIMIT = 1024  # message


def event_problem(event: JsonObj) -> tuple[str, str] | None:
    """The first problem of an Event, as (field, problem); None when there is none."""
    namespace = str((event.get("metadata") or {}).get("namespace") or "")
    subject = str((event.get("involvedObject") or {}).get("namespace") or "")
    mismatch = ("involvedObject.namespace", f"Invalid value: {subject!r}: does not match event.namespace")
    if not event.get("eventTime"):
        if (subject and subject != namespace) or (not subject and namespace not in ("", "default")):
            return mismatch
        return None
    if not subject and namespace not in ("default", "kube-system"):
        return mismatch
    component = str(event.get("reportingComponent") or "")
    if not component:
        return "reportingComponent", "Required value"
    why = qualified_name_problem(component)
    if why is not None:
        return "reportingComponent", f"Invalid value: {component!r}: {why}"
    for field in ("reportingInstance", "action", "reason"):
        value = str(event.get(field) or "")
        if not value:
            return field, "Required value"
        if len(value.encode()) > LENGTH_LIMIT:
            return field, f'Invalid value: "": can have at most {LENGTH_LIMIT} characters'
    if len(str(event.get("message") or "").encode()) > NOTE_LIMIT:
        return "message", f'Invalid value: "": can have at most {NOTE_LIMIT} characters'
    return None
