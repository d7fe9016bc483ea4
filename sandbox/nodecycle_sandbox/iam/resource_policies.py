"""A service principal's call on a resource judged by that resource's own policy alone: EventBridge sending an
event it could not deliver to a rule target's dead-letter queue (``sqs:SendMessage``, as
``events.amazonaws.com``, on behalf of the rule: ``aws:SourceArn``, ``aws:SourceAccount``). No identity policy
is involved, so the queue's policy must allow it and none of its statements deny it; a queue without a policy
refuses every service (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rule-dlq.html: "grant
permissions to the dead-letter queue")."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from nodecycle_sandbox.iam.evaluate import Request, context_of, evaluate
from nodecycle_sandbox.iam.policy import parse_policy


def service_may(
    policy: str | Mapping[str, Any] | None,
    *,
    service: str,
    action: str,
    resource: str,
    source_arn: str,
    source_account: str,
) -> bool:
    """Whether ``policy`` (a queue's ``Policy`` attribute, as a string or parsed; None: the queue has none) lets
    ``service`` make ``action`` on ``resource`` for ``source_arn`` in ``source_account``."""
    if not policy:
        return False
    document = json.loads(policy) if isinstance(policy, str) else policy
    request = Request(
        action,
        resource,
        context_of({"aws:SourceArn": source_arn, "aws:SourceAccount": source_account}),
        principal={"Service": (service,)},
    )
    return evaluate(parse_policy(document, source=resource), request).allowed
