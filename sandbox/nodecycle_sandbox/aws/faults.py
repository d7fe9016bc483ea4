"""Faults of the emulated AWS endpoint, with the error codes and wire shapes each service really uses:

- ``aws-throttle``: Auto Scaling and STS ``Throttling`` (400, query XML); EC2 ``RequestLimitExceeded``
  (503, EC2 XML); DynamoDB ``ProvisionedThroughputExceededException`` and SQS ``RequestThrottled`` (400,
  JSON); EKS ``ThrottlingException`` (429, REST JSON). A DynamoDB transaction (TransactWriteItems) is not
  refused so: DynamoDB cancels it, ``TransactionCanceledException`` whose ``CancellationReasons`` say
  ``ThrottlingError`` for its first item and ``None`` for the others (the API reference's reason codes), which
  botocore does not retry as it retries a throttle: the caller meets it at once. Nor is a BatchGetItem of more than
  one key: DynamoDB refuses one only when it could read none of its keys, and otherwise answers in part, the keys
  it could not read named ``UnprocessedKeys`` (the API reference), which botocore does not ask again: the first key
  of each table is read, the others named so;
- ``aws-error``: the service's 5xx (``InternalFailure``, ``InternalError``, ``InternalServerError``,
  ``ServerException``).
- ``aws-contention``: an Auto Scaling write meets another update of the same resource still pending (an operator's
  completion of the same lifecycle action, a scaling activity of the group): ``ResourceContention`` (500, Sender,
  "You already have a pending update to an Auto Scaling resource (for example, a group, instance, or load
  balancer)."; the API reference lists it for CompleteLifecycleAction, RecordLifecycleActionHeartbeat and the
  group's other writes), and nothing is done: the other update goes on, this one was refused. botocore retries it
  as it retries any 5xx, and its retry meets what the other update did (``No active Lifecycle Action found`` once
  that update settled the action). A rule of this kind names Auto Scaling's operations; it fires on no other
  service's;
- ``dynamodb-conflict``: a DynamoDB write meets another writer's transaction on the same item: a
  TransactWriteItems is cancelled, ``TransactionCanceledException`` whose ``CancellationReasons`` say
  ``TransactionConflict`` for its item number ``value`` (0: the first) and ``None`` for the others; a PutItem,
  UpdateItem or DeleteItem is refused, ``TransactionConflictException`` (400). Neither is retried by
  botocore (neither is in its standard mode's list of transient or throttling codes): the caller meets it on
  its first attempt, and nothing is written. Reads are never refused so (GetItem, Query and Scan read the
  committed state alongside a transaction);
- ``aws-lost-answer``: the call is served (it landed: an address allocated, an action completed, an item
  written), then its answer is lost on the way back, which the caller sees as the service's 5xx; botocore sends
  it again, and the retry meets what the first attempt did (``No active Lifecycle Action found``,
  ``InvalidAllocationID.NotFound``, a conditional write that fails on the first one's item).
- ``aws-denied``: the call is refused as a service control policy or a permissions boundary changed for a
  while refuses it: ``AccessDenied`` (403; DynamoDB ``AccessDeniedException`` 400, EKS 403), EC2
  ``UnauthorizedOperation`` (403, with its encoded authorization failure message), each with the sentence
  ``iam/enforce.py`` writes for the caller's role, "with an explicit deny in a service control policy".

Nothing is done for a request that gets a fault but a lost answer: AWS refused it. A WSGI middleware in front of moto
(``server.py``) asks :meth:`AwsFaults.decide`; only the callers given when arming (the functions' access
keys) are eligible, and of their requests not those of the runner's event source mappings (which poll with
the function's key and say so in their User-Agent): the runner's pollers and the operator's calls are never
hit. One injector per process: armed through ``AwsControl.arm_faults``.
"""

from __future__ import annotations

import base64
import io
import json
import re
import uuid
import zlib
from collections.abc import Callable, Iterable
from typing import Any, cast
from urllib.parse import parse_qs

from nodecycle_sandbox.aws.ec2_throttling import THROTTLED_MESSAGE, THROTTLING, Ec2Throttling
from nodecycle_sandbox.faults import (
    AUTOSCALING_CONTENTION_KINDS,
    AWS_CONFLICT_KINDS,
    AWS_KINDS,
    AWS_REFUSAL_KINDS,
    RUNNER_AGENT,
    Fault,
    Injector,
)
from nodecycle_sandbox.iam.identities import IDENTITIES

_CREDENTIAL = re.compile(r"Credential=([^/]+)/[^/]+/[^/]+/([^/]+)/aws4_request")
# service -> (protocol, throttle code, throttle status, error code, error status)
_ERRORS: dict[str, tuple[str, str, int, str, int]] = {
    "autoscaling": ("query", "Throttling", 400, "InternalFailure", 500),
    "sts": ("query", "Throttling", 400, "InternalFailure", 500),
    "ec2": ("ec2", "RequestLimitExceeded", 503, "InternalError", 500),
    "dynamodb": ("json", "ProvisionedThroughputExceededException", 400, "InternalServerError", 500),
    "sqs": ("json", "RequestThrottled", 400, "InternalFailure", 500),
    "eks": ("rest-json", "ThrottlingException", 429, "ServerException", 500),
}
# service -> (denial code, status), as iam/enforce.py answers them; AccessDenied 403 for the others
_DENIED = {
    "ec2": ("UnauthorizedOperation", 403),
    "dynamodb": ("AccessDeniedException", 400),
    "eks": ("AccessDeniedException", 403),
}
_JSON_NAMESPACE = {"dynamodb": "com.amazonaws.dynamodb.v20120810", "sqs": "com.amazonaws.sqs"}
_QUERY_NAMESPACE = {"autoscaling": "http://autoscaling.amazonaws.com/doc/2011-01-01/"}

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class AwsFaults(Injector):
    def __init__(self) -> None:
        super().__init__("aws")
        self._callers: frozenset[str] | None = frozenset()

    def arm_for(self, faults: list[Fault], seed: int, callers: Iterable[str] | None) -> None:
        """Arm ``faults`` for requests signed with one of ``callers`` (access key ids; None: anyone)."""
        self._callers = None if callers is None else frozenset(callers)
        self.arm(faults, seed)

    def decide(self, environ: dict[str, Any]) -> tuple[int, list[tuple[str, str]], bytes, bool] | None:
        """The error response to send instead of the request's answer, and whether the request is served first
        (a lost answer), or None."""
        if not self.armed:
            return None
        found = _CREDENTIAL.search(environ.get("HTTP_AUTHORIZATION", ""))
        if found is None:
            return None
        caller, service = found.groups()
        if self._callers is not None and caller not in self._callers:
            return None
        if RUNNER_AGENT in environ.get("HTTP_USER_AGENT", ""):
            return None  # the runner's event source mapping, polling with the function's key
        operation = _operation(environ, service)
        name = f"{service}.{operation}"
        if service not in _ERRORS:
            return None
        kinds: tuple[str, ...] = (*AWS_KINDS, *AWS_REFUSAL_KINDS)
        if service == "dynamodb" and operation in _CONFLICTING_WRITES:
            kinds = (*kinds, *AWS_CONFLICT_KINDS)
        if service == "autoscaling" and not operation.startswith("Describe"):
            kinds = (*kinds, *AUTOSCALING_CONTENTION_KINDS)
        named = _record_instances(environ) if service == "dynamodb" else _instances(environ)
        fault = self.draw(kinds, name, " ".join((name, *named)))
        if fault is None:
            return None
        if fault.kind == "dynamodb-conflict" and operation == "TransactWriteItems":
            return *_transaction_conflict(environ, round(fault.value)), False
        if fault.kind == "dynamodb-conflict":
            return *_response("json", service, "TransactionConflictException", 400, _CONFLICT), False
        if fault.kind == "aws-contention":
            # (a Sender fault with a 5xx status, as the service model declares it: the request was refused)
            return *_response("query", service, "ResourceContention", 500, _CONTENTION, kind="Sender"), False
        protocol, throttle, throttle_status, error, error_status = _ERRORS[service]
        if fault.kind == "aws-denied":
            code, status = _DENIED.get(service, ("AccessDenied", 403))
            return *_response(protocol, service, code, status, _denial(caller, service, operation)), False
        if fault.kind == "aws-throttle" and (service, operation) == ("dynamodb", "TransactWriteItems"):
            return *_transaction_throttled(environ), False
        if (
            fault.kind == "aws-throttle"
            and (service, operation) == ("dynamodb", "BatchGetItem")
            and sum(len(asked.get("Keys") or []) for asked in _batch(environ).values()) > 1
        ):
            return ANSWERED_IN_PART
        if fault.kind == "aws-throttle":
            return *_response(protocol, service, throttle, throttle_status, "Rate exceeded"), False
        failed = _response(protocol, service, error, error_status, "We encountered an internal error.")
        return *failed, fault.kind == "aws-lost-answer"


# The writes another transaction can hold an item against (DynamoDB's developer guide, transaction conflicts)
_CONFLICTING_WRITES = frozenset({"TransactWriteItems", "PutItem", "UpdateItem", "DeleteItem"})
_CONFLICT = "Transaction is ongoing for the item"
_CONTENTION = (
    "You already have a pending update to an Auto Scaling resource "
    "(for example, a group, instance, or load balancer)."
)

_THROTTLED_ITEM = (
    "Throughput exceeds the current capacity of your table or index. DynamoDB is automatically scaling your table "
    "or index so please try again shortly."
)


def _transaction_throttled(environ: dict[str, Any]) -> tuple[int, list[tuple[str, str]], bytes]:
    """DynamoDB's answer to a transaction it cancelled for throughput: one reason per item, in their order."""
    return _cancelled(environ, 0, {"Code": "ThrottlingError", "Message": _THROTTLED_ITEM})


def _transaction_conflict(environ: dict[str, Any], index: int) -> tuple[int, list[tuple[str, str]], bytes]:
    """DynamoDB's answer to a transaction cancelled for another's on its item number ``index``."""
    return _cancelled(environ, index, {"Code": "TransactionConflict", "Message": _CONFLICT})


def _cancelled(
    environ: dict[str, Any], index: int, reason: dict[str, str]
) -> tuple[int, list[tuple[str, str]], bytes]:
    """A TransactionCanceledException naming ``reason`` for the item ``index`` (the last one if there are fewer)
    and ``None`` for the others."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)  # (put back, as _form does)
    try:
        items = len(json.loads(body or b"{}").get("TransactItems") or [None])
    except ValueError:
        items = 1
    reasons = [{"Code": "None"}] * items
    reasons[max(0, min(index, items - 1))] = reason
    codes = ", ".join(r["Code"] for r in reasons)
    answer = {
        "__type": f"{_JSON_NAMESPACE['dynamodb']}#TransactionCanceledException",
        "Message": f"Transaction cancelled, please refer cancellation reasons for specific reasons [{codes}]",
        "CancellationReasons": reasons,
    }
    encoded = json.dumps(answer).encode()
    headers = [
        ("Content-Type", "application/x-amz-json-1.0"),
        ("x-amzn-RequestId", str(uuid.uuid4())),
        ("Content-Length", str(len(encoded))),
    ]
    return 400, headers, encoded


def _denial(caller: str, service: str, operation: str) -> str:
    """What AWS says of a call a service control policy denies, naming the caller's role session."""
    principal = IDENTITIES.principal(caller)
    user = principal.arn if principal is not None else caller  # (every armed caller is a function's key)
    action = f"{service}:{operation}"
    if service == "sqs":
        action = action.lower()  # SQS names the action in lower case
    message = f"User: {user} is not authorized to perform: {action} with an explicit deny in a service control policy"
    if service == "ec2":
        encoded = base64.b64encode(json.dumps({"allowed": False, "message": message}).encode()).decode()
        return (
            f"You are not authorized to perform this operation. {message}. "
            f"Encoded authorization failure message: {encoded}"
        )
    return message


def _operation(environ: dict[str, Any], service: str) -> str:
    """The API operation: from X-Amz-Target (JSON protocols), the Action parameter (query protocols), or
    the method and path (EKS's REST API). Reading a form body puts it back for moto."""
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if target:
        return target.rsplit(".", 1)[-1]
    action = parse_qs(environ.get("QUERY_STRING", "")).get("Action")
    if action:
        return action[0]
    if environ.get("REQUEST_METHOD") == "POST":
        action = _form(environ).get("Action")
        if action:
            return action[0]
    if (
        service == "eks"
        and environ.get("REQUEST_METHOD") == "GET"
        and environ.get("PATH_INFO", "").startswith("/clusters/")
    ):
        return "DescribeCluster"
    return "Unknown"


def _instances(environ: dict[str, Any]) -> list[str]:
    """The instances a query-protocol request names (a lifecycle action's ``InstanceId``): the firing says
    which action was refused, so the judges can tell a drain from its completion's retries."""
    form = _form(environ)
    return [value for key, values in form.items() if key.startswith("InstanceId") for value in values]


# A lifecycle record's id (and its claim's) begins with its instance's: "i-0123456789abcdef0/terminate/<token>"
_RECORD_ID = re.compile(r'"S"\s*:\s*"(i-[0-9a-f]{8,17})[/"]')


def _record_instances(environ: dict[str, Any]) -> list[str]:
    """The instances whose lifecycle records a DynamoDB request names (its items' and keys' ids), each once: the
    firing says whose write was refused, so the judges can tell a completer's claim left standing (its record's
    commit denied after the claim) from a refusal of another lifecycle's. The body is put back for moto."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)
    return list(dict.fromkeys(_RECORD_ID.findall(body.decode("utf-8", "replace"))))


_FORM = "nodecycle_sandbox.form"  # the parsed body, kept in the request's environ: read once


def _form(environ: dict[str, Any]) -> dict[str, list[str]]:
    """A query-protocol request's form body, parsed once per request and put back for moto."""
    if _FORM not in environ:
        form: dict[str, list[str]] = {}
        if "form-urlencoded" in environ.get("CONTENT_TYPE", ""):
            length = int(environ.get("CONTENT_LENGTH") or 0)  # a socket's stream has no end to read to
            body = environ["wsgi.input"].read(length) if length else b""
            environ["wsgi.input"] = io.BytesIO(body)
            form = parse_qs(body.decode("utf-8", "replace"))
        environ[_FORM] = form
    return cast(dict[str, list[str]], environ[_FORM])


def _response(
    protocol: str, service: str, code: str, status: int, message: str, kind: str | None = None
) -> tuple[int, list[tuple[str, str]], bytes]:
    """The error answer, in the service's protocol; ``kind``: a query protocol's fault type, Sender or Receiver (by
    default by the status: a 5xx the service's)."""
    request_id = str(uuid.uuid4())
    if protocol == "json":
        body = json.dumps({"__type": f"{_JSON_NAMESPACE[service]}#{code}", "message": message}).encode()
        headers = [("Content-Type", "application/x-amz-json-1.0"), ("x-amzn-RequestId", request_id)]
    elif protocol == "rest-json":
        body = json.dumps({"message": message}).encode()
        headers = [
            ("Content-Type", "application/json"),
            ("x-amzn-ErrorType", code),
            ("x-amzn-RequestId", request_id),
        ]
    elif protocol == "ec2":
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{code}</Code>'
            f"<Message>{message}</Message></Error></Errors><RequestID>{request_id}</RequestID></Response>"
        ).encode()
        headers = [("Content-Type", "text/xml;charset=UTF-8")]
    else:
        namespace = _QUERY_NAMESPACE.get(service, f"https://{service}.amazonaws.com/doc/")
        kind = kind or ("Receiver" if status >= 500 else "Sender")
        body = (
            f'<ErrorResponse xmlns="{namespace}"><Error><Type>{kind}</Type><Code>{code}</Code>'
            f"<Message>{message}</Message></Error><RequestId>{request_id}</RequestId></ErrorResponse>"
        ).encode()
        headers = [("Content-Type", "text/xml"), ("x-amzn-RequestId", request_id)]
    return status, [*headers, ("Content-Length", str(len(body)))], body


# The one injector of this process (moto serves every account and region of the process).
FAULTS = AwsFaults()

# What decide answers for a BatchGetItem that DynamoDB reads in part (see _in_part): served, then its answer cut.
ANSWERED_IN_PART: tuple[int, list[tuple[str, str]], bytes, bool] = (0, [], b"", True)


def _batch(environ: dict[str, Any]) -> dict[str, Any]:
    """A BatchGetItem request's RequestItems (table -> its keys and options); the body is put back for moto."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)
    try:
        asked = json.loads(body or b"{}").get("RequestItems") or {}
    except ValueError:
        return {}
    return cast(dict[str, Any], asked)


def _in_part(app: WsgiApp, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """``app``'s answer to a BatchGetItem with only the first key of each table read: the others, and their items,
    moved to UnprocessedKeys (with the table's options, ConsistentRead kept), as DynamoDB answers one it could read
    in part. Its checksum (x-amz-crc32, which botocore verifies) is that of the answer sent."""
    asked = _batch(environ)
    answered: dict[str, Any] = {}

    def keep(status: str, headers: list[tuple[str, str]], *_: Any) -> Callable[[bytes], None]:
        answered.update(status=status, headers=headers)
        return lambda _data: None

    answer = app(environ, keep)
    try:
        body = b"".join(answer)
    finally:
        close = getattr(answer, "close", None)
        if close is not None:
            close()
    if not str(answered.get("status", "")).startswith("200"):
        start_response(answered["status"], answered["headers"])
        return [body]
    document = json.loads(body)
    responses = document.setdefault("Responses", {})
    unprocessed = document.setdefault("UnprocessedKeys", {})
    for table, request in asked.items():
        first, *others = request.get("Keys") or [None]
        if not others:
            continue
        unprocessed[table] = {**request, "Keys": others}
        responses[table] = [
            item for item in responses.get(table, []) if all(item.get(k) == v for k, v in first.items())
        ]
    cut = json.dumps(document).encode()
    headers = [
        (name, value)
        for name, value in answered["headers"]
        if name.lower() not in ("content-length", "x-amz-crc32")
    ]
    headers += [("Content-Length", str(len(cut))), ("x-amz-crc32", str(zlib.crc32(cut) & 0xFFFFFFFF))]
    start_response(answered["status"], headers)
    return [cut]


def throttled(
    environ: dict[str, Any], throttling: Ec2Throttling
) -> tuple[int, list[tuple[str, str]], bytes] | None:
    """EC2's answer to a request its account's buckets have no token for (``ec2_throttling.py``), or None."""
    found = _CREDENTIAL.search(environ.get("HTTP_AUTHORIZATION", ""))
    if not throttling.on or found is None or found.group(2) != "ec2":
        return None
    params = {**parse_qs(environ.get("QUERY_STRING", "")), **_form(environ)}
    action = (params.get("Action") or ["Unknown"])[0]
    if throttling.admit(environ["HTTP_AUTHORIZATION"], action, params):
        return None
    return _response("ec2", "ec2", "RequestLimitExceeded", 503, THROTTLED_MESSAGE)


def middleware(app: WsgiApp, faults: AwsFaults = FAULTS, throttling: Ec2Throttling = THROTTLING) -> WsgiApp:
    """``app`` behind EC2's request throttling, then the fault injector."""

    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        refusal = throttled(environ, throttling)
        refused = (*refusal, False) if refusal is not None else faults.decide(environ)
        if refused is None:
            return app(environ, start_response)
        if refused is ANSWERED_IN_PART:
            return _in_part(app, environ, start_response)
        status, headers, body, served = refused
        if served:
            # (the request lands, its answer is dropped: read to the end, so that the call is done)
            answer = app(environ, lambda *_: lambda _data: None)
            try:
                for _ in answer:
                    pass
            finally:
                close = getattr(answer, "close", None)
                if close is not None:
                    close()
        start_response(f"{status} {_REASONS.get(status, 'Error')}", headers)
        return [body]

    return serve


_REASONS = {
    400: "Bad Request",
    403: "Forbidden",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
