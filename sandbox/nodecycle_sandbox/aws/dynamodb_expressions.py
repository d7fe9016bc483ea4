"""DynamoDB requests whose expression placeholders are all used, as DynamoDB requires.

DynamoDB refuses a request that defines a value (``ExpressionAttributeValues``) or a name
(``ExpressionAttributeNames``) none of its expressions uses: "Value provided in ExpressionAttributeValues unused in
expressions: keys: {:unused}" (a ValidationException, 400), and one that defines either without any expression
("ExpressionAttributeValues can only be specified when using expressions"). So do the AWS SDKs' users find out
(getmoto/moto#8474, floci-io/floci#2923, ExtendDB/extenddb#10: PutItem, DeleteItem, UpdateItem, Query, Scan and
each item of TransactWriteItems). moto 5.2 checks the names of a PutItem and both of an UpdateItem, and takes the
rest: a PutItem, a Scan or a transaction's Put carrying a value its condition no longer names, or a PutItem that
sends values without a condition (a condition built only in some cases, its values always), passed in the sandbox
and fails every time in AWS, where no retry changes it.

Here each such request (and each item of a transaction) is checked before moto serves it: every placeholder it
defines is named by one of its expressions (ConditionExpression, KeyConditionExpression, FilterExpression,
UpdateExpression, ProjectionExpression), and none is defined without an expression; otherwise it is refused with
DynamoDB's ValidationException and its message.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from functools import wraps
from typing import Any

from moto.dynamodb.exceptions import MockValidationException
from moto.dynamodb.responses import DynamoHandler

_MARKER = "_nodecycle_sandbox_expressions"
_EXPRESSIONS = (
    "ConditionExpression",
    "KeyConditionExpression",
    "FilterExpression",
    "UpdateExpression",
    "ProjectionExpression",
)
# (a placeholder: ":" or "#", then letters, digits and underscores; expressions carry no literals to mistake)
_PLACEHOLDER = re.compile(r"[:#][A-Za-z0-9_]+")
_SINGLE = ("put_item", "delete_item", "update_item", "query", "scan")
_TRANSACTION_OPERATIONS = ("Put", "Delete", "Update", "ConditionCheck")


def refusal(request: Mapping[str, Any]) -> str | None:
    """DynamoDB's message refusing ``request`` (an operation's parameters) for its placeholders; None: none."""
    expressions = [str(request[key]) for key in _EXPRESSIONS if request.get(key)]
    used = {match for expression in expressions for match in _PLACEHOLDER.findall(expression)}
    for parameter in ("ExpressionAttributeNames", "ExpressionAttributeValues"):
        defined = request.get(parameter)
        if defined is None:
            continue
        if not expressions:
            return f"{parameter} can only be specified when using expressions"
        unused = sorted(set(defined) - used)
        if unused:
            return f"Value provided in {parameter} unused in expressions: keys: {{{', '.join(unused)}}}"
    return None


def _checked(serve: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(serve)
    def operation(self: DynamoHandler) -> Any:
        refused = refusal(self.body)
        if refused is not None:
            raise MockValidationException(refused)
        return serve(self)

    return operation


def _checked_transaction(serve: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(serve)
    def transact_write_items(self: DynamoHandler) -> Any:
        for item in self.body.get("TransactItems") or []:
            for kind in _TRANSACTION_OPERATIONS:
                if isinstance(item.get(kind), dict):
                    refused = refusal(item[kind])
                    if refused is not None:
                        raise MockValidationException(refused)
        return serve(self)

    return transact_write_items


def install() -> None:
    """Idempotent: a second call changes nothing."""
    if getattr(DynamoHandler, _MARKER, False):
        return
    handler: Any = DynamoHandler
    for name in _SINGLE:
        setattr(handler, name, _checked(getattr(DynamoHandler, name)))
    handler.transact_write_items = _checked_transaction(DynamoHandler.transact_write_items)
    setattr(DynamoHandler, _MARKER, True)
