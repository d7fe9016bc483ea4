"""Faults of the sandbox API server, as a busy or failing kube-apiserver shows them to its clients:

- ``kube-conflict``: 409 Conflict on a write (PUT, PATCH) that carries a ``resourceVersion``, as if another
  writer had got there first (a storm when its probability is high); nothing is written;
- ``kube-throttle``: 429 with ``Retry-After`` and a plain-text body, as API Priority and Fairness rejects a
  request before any API handler (no ``Status``); nothing is done;
- ``kube-error``: 500 InternalError; nothing is done;
- ``kube-slow``: the request is served ``value`` seconds late (a client's read timeout may expire first,
  while the write still happens);
- ``kube-hang``: the connection is taken and the request read, and then nothing: no answer, nothing done, until
  the client gives up and closes it (its read timeout), or ``value`` seconds have passed (0: no limit), or the
  server stops; then the connection is closed. As an API server behind a load balancer that lost its etcd;
- ``kube-drop``: the connection is closed before the request is served (nothing is done);
- ``kube-lost-response``: the request is served, then the connection is closed before the response is sent;
- ``kube-cut-answer``: the request is served, its answer's status and headers sent, and the connection closed
  half-way through its body (a connection lost mid-answer: an API server replica going away, a flow reset); the
  client has its status, then fails reading the body (urllib3: ProtocolError, "Connection broken: IncompleteRead").

Refusals, judged where the API server judges them (after authentication, with the request's own user and
attributes), so their Status is the one a real cluster writes:

- ``kube-webhook-down``: a write (create, update, patch, delete) meets a validating webhook with
  ``failurePolicy: Fail`` that cannot be reached: 500 InternalError ``failed calling webhook``; nothing is done;
- ``kube-webhook-deny``: a write is denied by admission, in one of the three answers a real cluster gives, drawn on
  the fault's own dice: a webhook's deny as today's kube-apiserver words it (403 Forbidden, ``<resource> "<name>"
  is forbidden: admission webhook ... denied the request: ...``, webhook errors' ToStatusErr with no code set); a
  webhook's deny without a code on a kube-apiserver before that (400, no reason: the code raised to 400); a
  ValidatingAdmissionPolicy's deny (422 Invalid, ``... is forbidden: ValidatingAdmissionPolicy '...' with binding
  '...' denied request: ...``, its message as the one cause: the reason a policy gives none). Nothing is done;
- ``kube-forbidden``: any request is refused by RBAC, as while a ClusterRoleBinding or an access entry is
  edited: 403 Forbidden with the authorizer's message (``User "..." cannot patch resource "nodes" ...``).

The HTTP transport asks :meth:`KubeFaults.decide` before serving each request (``httpd.py``); a refusal is
handed to the router, which raises it once it knows who asks for what (``routing.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from nodecycle_sandbox.faults import KUBE_KINDS, KUBE_REFUSAL_KINDS, Injector
from nodecycle_sandbox.kube import errors
from nodecycle_sandbox.kube.admission import Denial
from nodecycle_sandbox.kube.meta import JsonObj
from nodecycle_sandbox.kube.rbac import Attributes, User, forbidden_message

_WRITES = frozenset({"PUT", "PATCH"})
# What admission judges: create, update, patch, delete (never a read).
_ADMITTED = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_WEBHOOK = "policy.chaos.nodecycle.io"
_POLICY = "chaos.nodecycle.io"
_WEBHOOK_URL = "https://policy-webhook.policy-system.svc:443/validate?timeout=10s"
Refusal = Callable[[User, Attributes], errors.ApiError]


@dataclass(frozen=True)
class KubeFaultAction:
    delay: float = 0.0  # serve this much later
    # send this instead of serving: a Status, or plain text
    respond: tuple[int, JsonObj | str, dict[str, str]] | None = None
    drop_before: bool = False  # close the connection instead of serving
    # answer nothing, do nothing, until the client hangs up (or these seconds have passed; 0: no limit)
    hang: float | None = None
    drop_after: bool = False  # serve, then close the connection without a response
    cut_answer: bool = False  # serve, then close the connection half-way through the answer's body
    headers: dict[str, str] = field(default_factory=dict)
    refuse: Refusal | None = None  # serve as far as authorization, then answer this


def request_name(method: str, path: str) -> tuple[str, str]:
    """(``"PATCH nodes"``-style name, object name) of a resource request; ("GET /version", "") otherwise."""
    segments = [unquote(s) for s in path.split("?")[0].strip("/").split("/") if s]
    if segments[:1] == ["api"]:
        rest = segments[2:]
    elif segments[:1] == ["apis"]:
        rest = segments[3:]
    else:
        return f"{method} {path}", ""
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    if not rest:
        return f"{method} {path}", ""
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    return f"{method} {resource}", rest[1] if len(rest) > 1 else ""


def _has_resource_version(body: bytes) -> bool:
    try:
        data: Any = json.loads(body) if body else None
    except ValueError:
        return False
    meta = data.get("metadata") if isinstance(data, dict) else None
    return isinstance(meta, dict) and bool(meta.get("resourceVersion"))


def _status(code: int, reason: str, message: str, details: JsonObj | None = None) -> JsonObj:
    body: JsonObj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return body


class KubeFaults(Injector):
    def __init__(self) -> None:
        super().__init__("kube")

    def decide(self, method: str, path: str, body: bytes) -> KubeFaultAction | None:
        if not self.armed:
            return None
        name, obj = request_name(method, path)
        kinds: tuple[str, ...] = (*KUBE_KINDS, *KUBE_REFUSAL_KINDS)
        if method not in _WRITES or not _has_resource_version(body):
            kinds = tuple(k for k in kinds if k != "kube-conflict")
        if method not in _ADMITTED:
            kinds = tuple(k for k in kinds if not k.startswith("kube-webhook-"))
        if not obj and name.startswith(f"{method} /"):  # not a resource: RBAC's bootstrap grants discovery
            kinds = tuple(k for k in kinds if k not in KUBE_REFUSAL_KINDS)
        fault = self.draw(kinds, name, f"{name} {obj}".strip())
        if fault is None:
            return None
        if fault.kind == "kube-webhook-deny":
            # which of admission's answers, on the fault's own seeded dice (reproducible from the run's seed)
            shape = min(int(self.uniform(0, len(_DENIALS))), len(_DENIALS) - 1)
            return KubeFaultAction(refuse=_DENIALS[shape])
        if fault.kind in KUBE_REFUSAL_KINDS:
            return KubeFaultAction(refuse=_REFUSALS[fault.kind])
        resource = name.split(" ", 1)[1]
        if fault.kind == "kube-conflict":
            message = (
                f'Operation cannot be fulfilled on {resource.split("/")[0]} "{obj}": the object has been '
                "modified; please apply your changes to the latest version and try again"
            )
            return KubeFaultAction(respond=(409, _status(409, "Conflict", message, {"name": obj}), {}))
        if fault.kind == "kube-throttle":
            # kube-apiserver's tooManyRequests filter: http.Error's text, not a Status
            retry_after = max(1, round(fault.value or 1))
            text = "Too many requests, please try again later.\n"
            return KubeFaultAction(respond=(429, text, {"Retry-After": str(retry_after)}))
        if fault.kind == "kube-error":
            message = "Internal error occurred: etcdserver: request timed out"
            return KubeFaultAction(respond=(500, _status(500, "InternalError", message), {}))
        if fault.kind == "kube-slow":
            return KubeFaultAction(delay=fault.value)
        if fault.kind == "kube-hang":
            return KubeFaultAction(hang=fault.value)
        if fault.kind == "kube-drop":
            return KubeFaultAction(drop_before=True)
        if fault.kind == "kube-cut-answer":
            return KubeFaultAction(cut_answer=True)
        return KubeFaultAction(drop_after=True)


def _forbidden(user: User, attributes: Attributes) -> errors.ApiError:
    message, details = forbidden_message(user, attributes)
    return errors.ApiError(403, "Forbidden", message, details)


def _webhook_down(_user: User, _attributes: Attributes) -> errors.ApiError:
    message = (
        f'Internal error occurred: failed calling webhook "{_WEBHOOK}": failed to call webhook: Post '
        f'"{_WEBHOOK_URL}": dial tcp 10.100.71.12:443: connect: connection refused'
    )
    return errors.ApiError(500, "InternalError", message)


def _denied_what(attributes: Attributes) -> tuple[str, str, JsonObj]:
    """What admission.NewForbidden names: ``pods``, ``policies.example.io``; the name (``Unknown`` without one, as
    ToStatusErr writes it); and the Status details it gives (the resource in ``kind``, as NewForbidden does)."""
    group_resource = ".".join(p for p in (attributes.resource, attributes.api_group) if p)
    name = attributes.name or "Unknown"
    return group_resource, name, {"name": name, "group": attributes.api_group, "kind": attributes.resource}


def _explanation(attributes: Attributes) -> str:
    what = "/".join(p for p in (attributes.resource, attributes.subresource) if p)
    return f"{what} of {attributes.name or 'this object'} is not allowed now"


def _webhook_deny_forbidden(_user: User, attributes: Attributes) -> errors.ApiError:
    # kube-apiserver's webhook errors.ToStatusErr today: a deny without a code is 403, reason Forbidden, the
    # denial prefixed as NewForbidden's
    group_resource, name, details = _denied_what(attributes)
    denied = f'admission webhook "{_WEBHOOK}" denied the request: {_explanation(attributes)}'
    message = f'{group_resource} "{name}" is forbidden: {denied}'
    return errors.ApiError(403, "Forbidden", message, details)


def _webhook_deny_bad_request(_user: User, attributes: Attributes) -> errors.ApiError:
    # kube-apiserver's ToStatusErr before that: a code under 400 raised to 400, the webhook's reason (none), the
    # message as Denial renders it
    return Denial(_WEBHOOK, "", "", code=400, message=_explanation(attributes)).error()


def _policy_deny(_user: User, attributes: Attributes) -> errors.ApiError:
    # the ValidatingAdmissionPolicy dispatcher: admission.NewForbidden, then the reason set to the policy's
    # (Invalid without one) and the code to reasonToCode's (422), the message added as a cause
    group_resource, name, details = _denied_what(attributes)
    denied = (
        f"ValidatingAdmissionPolicy '{_POLICY}' with binding '{_POLICY}-binding' denied request: "
        f"{_explanation(attributes)}"
    )
    message = f'{group_resource} "{name}" is forbidden: {denied}'
    return errors.ApiError(422, "Invalid", message, {**details, "causes": [{"message": denied}]})


# kube-webhook-deny's answers, one drawn per firing
_DENIALS: tuple[Refusal, ...] = (_webhook_deny_forbidden, _webhook_deny_bad_request, _policy_deny)


_REFUSALS: dict[str, Refusal] = {
    "kube-forbidden": _forbidden,
    "kube-webhook-down": _webhook_down,
    "kube-webhook-deny": _webhook_deny_forbidden,
}
