"""Kubernetes API errors, each rendered as the ``kind: Status`` body a real API server sends."""

from __future__ import annotations

from typing import Any

from nodecycle_sandbox.kube.resources import ResourceType


class ApiError(Exception):
    """An API failure with the HTTP code, reason and message of the matching Kubernetes ``Status``."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
        *,
        retry_after: int = 0,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        # details.retryAfterSeconds, and the Retry-After header kube-apiserver sends with it
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)} if self.retry_after > 0 else {}

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if not self.reason:
            del body["reason"]  # (a Status a handler answered with, which names none: omitted as Go omits it)
        if self.details is not None:
            body["details"] = self.details
        if self.retry_after > 0:
            body["details"] = {**(self.details or {}), "retryAfterSeconds": self.retry_after}
        return body


def _details(rt: ResourceType, name: str, **extra: Any) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": rt.plural}
    if rt.group:
        details["group"] = rt.group
    details.update(extra)
    return details


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{rt.qualified} "{name}" not found', _details(rt, name))


def already_exists(rt: ResourceType, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{rt.qualified} "{name}" already exists', _details(rt, name))


def conflict(rt: ResourceType, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {rt.qualified} "{name}": {why}',
        _details(rt, name),
    )


def stale_resource_version(rt: ResourceType, name: str) -> ApiError:
    return conflict(
        rt,
        name,
        "the object has been modified; please apply your changes to the latest version and try again",
    )


# field.ErrorType: the words that begin a field error's text, and the cause reason kube-apiserver gives it
_FIELD_ERROR_TYPES = (
    ("Required value", "FieldValueRequired"),
    ("Duplicate value", "FieldValueDuplicate"),
    ("Invalid value", "FieldValueInvalid"),
    ("Unsupported value", "FieldValueNotSupported"),
    ("Forbidden", "FieldValueForbidden"),
    ("Too long", "FieldValueTooLong"),
    ("Too many", "FieldValueTooMany"),
    ("Internal error", "InternalError"),
)


def field_error_reason(problem: str) -> str:
    """The cause reason of a field error whose text is ``problem``: ``Too long: must have at most 1048576 bytes``
    is FieldValueTooLong, as field.Error's Type makes both its words and its reason (FieldValueInvalid for a text
    of no known type)."""
    for words, reason in _FIELD_ERROR_TYPES:
        if problem == words or problem.startswith(f"{words}:"):
            return reason
    return "FieldValueInvalid"


def invalid(rt: ResourceType, name: str, field: str, problem: str, reason: str = "") -> ApiError:
    """422 with one field cause, e.g. ``invalid(rt, "x", "metadata.name", "Required value")`` (``reason``: the
    cause's, as field.ErrorType names it; by default the one the problem's first words say: FieldValueTooLong for
    a ``Too long: ...``, FieldValueForbidden for a ``Forbidden: ...``)."""
    return ApiError(
        422,
        "Invalid",
        f'{rt.kind} "{name}" is invalid: {field}: {problem}',
        {
            "name": name,
            "kind": rt.kind,
            "group": rt.group,
            "causes": [{"reason": reason or field_error_reason(problem), "message": problem, "field": field}],
        },
    )


def expired_continue() -> ApiError:
    """410 for a list continued from a revision etcd has compacted away (kube-apiserver's words; it also offers
    a token for an inconsistent rest of the list, which the sandbox does not)."""
    return ApiError(
        410,
        "Expired",
        "The provided continue parameter is too old to display a consistent list result. You can start a new "
        "list without the continue parameter.",
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def method_not_allowed(message: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def request_entity_too_large(message: str) -> ApiError:
    return ApiError(413, "RequestEntityTooLarge", f"Request entity too large: {message}")


def unsupported_media_type(content_type: str) -> ApiError:
    return ApiError(
        415, "UnsupportedMediaType", f"the body of the request was in an unknown format: {content_type}"
    )


def too_many_requests(message: str, causes: list[dict[str, str]], retry_after: int = 0) -> ApiError:
    return ApiError(429, "TooManyRequests", message, {"causes": causes}, retry_after=retry_after)


def internal_error(message: str) -> ApiError:
    return ApiError(
        500, "InternalError", f"Internal error occurred: {message}", {"causes": [{"message": message}]}
    )


def path_not_found(path: str) -> ApiError:
    return ApiError(404, "NotFound", f"the server could not find the requested resource ({path})", {})
