"""The hook into moto: every call made with a function's access key is evaluated against that function's
role, and a denied call is answered as AWS answers it.

- Query and JSON services: ``AccessDenied`` (DynamoDB and EKS: ``AccessDeniedException``) with
  ``User: <session ARN> is not authorized to perform: <action> on resource: <ARN> because no
  identity-based policy allows the <action> action`` (or ``with an explicit deny in an identity-based
  policy``);
- EC2: ``UnauthorizedOperation`` with ``You are not authorized to perform this operation.``, the same
  sentence, and an ``Encoded authorization failure message``.

Patched on moto's ``BaseResponse.call_action`` (every service's operations go through it), once per
process; keys that are not a function's are the administrator's and pass untouched.
"""

from __future__ import annotations

import base64
import json
import warnings
from typing import Any

from moto.core.exceptions import ServiceException
from moto.core.responses import ActionResult, BaseResponse

from nodecycle_sandbox.iam.evaluate import Decision, Request, Verdict, context_of, evaluate
from nodecycle_sandbox.iam.identities import IDENTITIES, JournalEntry, Principal, Role
from nodecycle_sandbox.iam.requests import UNAUTHORIZED_ACTIONS, requests_for

_MARKER = "_nodecycle_iam_installed"
# (error code, HTTP status) by service; Query/JSON services not listed answer AccessDenied with 403.
_DENIED = {
    "ec2": ("UnauthorizedOperation", 403),
    "dynamodb": ("AccessDeniedException", 400),
    "eks": ("AccessDeniedException", 403),
}


class AccessDenied(Exception):
    """A denial, ready to be rendered (also raised by the lifecycle emulation for a hook role)."""

    def __init__(self, service: str, message: str) -> None:
        super().__init__(message)
        self.service = service
        self.message = message


class _DeniedError(ServiceException):
    """What moto serializes in the service's own protocol (declared outside moto's packages, so that moto
    looks the error code up in the service being called)."""


def install() -> None:
    """Idempotent: patch moto's single dispatch point for operations."""
    if getattr(BaseResponse, _MARKER, False):
        return
    original = BaseResponse.call_action

    def call_action(self: BaseResponse) -> Any:
        principal = IDENTITIES.principal(self.get_access_key()) if "Authorization" in self.headers else None
        if principal is not None:
            try:
                authorize(principal, requests_for(self))
            except AccessDenied as denied:
                return _render(self, denied)
        return original(self)

    BaseResponse.call_action = call_action  # type: ignore[method-assign]
    setattr(BaseResponse, _MARKER, True)


def authorize(principal: Principal, requests: list[Request]) -> None:
    """Raise AccessDenied unless the principal's role allows every request."""
    for request in requests:
        if request.action in UNAUTHORIZED_ACTIONS:
            continue
        if not request.resource_found:
            # Judged as any other, by the ARN its name gives (a grant by name holds, a grant on other names does
            # not) and without the tags it would have (a condition on one is false, as IAM has no such key);
            # not journaled: the decision is not one a policy can be replayed on.
            verdict = evaluate(principal.role.statements, request)
            if not verdict.allowed:
                raise AccessDenied(
                    request.action.split(":", 1)[0], denial_message(principal.arn, request, verdict)
                )
            continue
        verdict = _decide(principal.role, principal.role.statements, request)
        if not verdict.allowed:
            raise AccessDenied(
                request.action.split(":", 1)[0], denial_message(principal.arn, request, verdict)
            )


def authorize_service_role(
    role_arn: str, *, service: str, source_account: str, source_arn: str, requests: list[Request]
) -> None:
    """A service (Auto Scaling, for a hook's notification) assumes ``role_arn`` on behalf of
    ``source_arn`` and makes ``requests``: the trust policy must let it, and the role's policies allow
    them. Roles the sandbox was not told about are the administrator's, as unknown keys are."""
    role = IDENTITIES.role(role_arn)
    if role is None:
        return
    assume = Request(
        "sts:AssumeRole",
        role_arn,
        context_of({"aws:SourceAccount": source_account, "aws:SourceArn": source_arn}),
        principal={"Service": (service,)},
    )
    trust = _decide(role, role.trust, assume)
    if not trust.allowed:
        raise AccessDenied(
            "sts", f"{service} is not authorized to perform: sts:AssumeRole on resource: {role_arn}"
        )
    session = Principal("", role, "AutoScaling", source_account)
    authorize(session, requests)


def denial_message(user: str, request: Request, verdict: Verdict) -> str:
    action = request.action
    if action.startswith("sqs:"):
        action = action.lower()  # SQS names the action in lower case
    where = "" if request.resource == "*" else f" on resource: {request.resource}"
    if verdict.decision is Decision.EXPLICIT_DENY:
        why = "with an explicit deny in an identity-based policy"
    else:
        why = f"because no identity-based policy allows the {action} action"
    return f"User: {user} is not authorized to perform: {action}{where} {why}"


def _decide(role: Role, statements: tuple[Any, ...], request: Request) -> Verdict:
    verdict = evaluate(statements, request)
    IDENTITIES.record(
        JournalEntry(
            principal=role.arn,
            action=request.action,
            resource=request.resource,
            context=dict(request.context),
            allowed=verdict.allowed,
            statement=verdict.statement.label if verdict.statement is not None else "",
        )
    )
    return verdict


def _render(response: BaseResponse, denied: AccessDenied) -> Any:
    code, status = _DENIED.get(denied.service, ("AccessDenied", 403))
    message = denied.message
    if denied.service == "ec2":
        encoded = base64.b64encode(json.dumps({"allowed": False, "message": message}).encode()).decode()
        message = (
            f"You are not authorized to perform this operation. {message}. "
            f"Encoded authorization failure message: {encoded}"
        )
    with warnings.catch_warnings():
        # Access errors are common to every service, so the service models do not declare them: moto warns.
        warnings.simplefilter("ignore", UserWarning)
        _, headers, body = response.serialized(ActionResult(_DeniedError(code, message)))
    headers["status"] = status
    return status, headers, body
