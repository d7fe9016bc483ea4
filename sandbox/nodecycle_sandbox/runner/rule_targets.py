"""EventBridge invoking a rule's Lambda target, and what it does with an event it cannot deliver.

The runner handed every matched event (and every schedule's firing) to Lambda's asynchronous queue, whatever
became of the function: a function deleted by hand was taken as one throttled to nothing (its reserved
concurrency read as 0), its events retried by Lambda for their maximum age and then sent to the deleted
function's own failure destinations; a function whose permission for the rule was removed was invoked all the
same. On AWS both fail EventBridge's own call to Lambda, before any queue of Lambda's: "for errors that result
from missing permissions to a target, or if a target resource that no longer exists, no retry attempts will happen
[...]. EventBridge sends these events directly to the target DLQ"
(https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rule-dlq.html), the event as its body, with the
attributes ``RULE_ARN``, ``TARGET_ARN``, ``ERROR_CODE`` (``NO_RESOURCE``, ``NO_PERMISSIONS``) and
``ERROR_MESSAGE``; a target without a dead-letter queue drops it. So here:

- the runner gives each rule's function the permission SAM gives it (an ``AWS::Lambda::Permission`` per
  ``EventBridgeRule`` or ``Schedule`` event: ``lambda:InvokeFunction`` for ``events.amazonaws.com``, on the
  rule's ARN), which ``aws lambda remove-permission`` takes away as on AWS;
- before each delivery it asks Lambda whether the function is there and lets the rule invoke it (``GetPolicy``);
  if not, the event goes to the target's ``DeadLetterConfig`` queue as EventBridge sends it, or is dropped.

The other ways the call can fail (Lambda's 5xx, or its 429 for the account's invocation rate) are retried by
EventBridge within the target's ``RetryPolicy``; the sandbox has none of them. A function whose reserved
concurrency is 0 is not one: Lambda takes the event in, and its own failure handling applies
(``async_invoke.py``).
"""

from __future__ import annotations

import fnmatch
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nodecycle_sandbox.iam.resource_policies import service_may
from nodecycle_sandbox.runner.functions import FunctionSpec
from nodecycle_sandbox.runner.stack import StackDeployment

_log = logging.getLogger(__name__)

EVENTS_PRINCIPAL = "events.amazonaws.com"
NO_RESOURCE = "NO_RESOURCE"
NO_PERMISSIONS = "NO_PERMISSIONS"
# Lambda's answers are read again once older than this (a change by hand takes seconds on AWS too)
REFRESH_SECONDS = 1.0

Submit = Callable[[FunctionSpec, Any, str], None]


@dataclass(frozen=True)
class Refusal:
    code: str  # ERROR_CODE
    message: str  # ERROR_MESSAGE


class RuleTargets:
    """Gives the rules' functions their permissions, and delivers each rule's event as EventBridge would."""

    def __init__(
        self,
        deployment: StackDeployment,
        *,
        lambda_client: Any,
        sqs: Any,
        region: str,
        account: str,
        submit: Submit,
    ) -> None:
        self._deployment = deployment
        self._lambda = lambda_client
        self._sqs = sqs
        self._region = region
        self._account = account
        self._submit = submit
        self._lock = threading.Lock()
        self._answers: dict[str, tuple[float, Refusal | None]] = {}
        self._asking: dict[str, threading.Lock] = {}

    def rule_arn(self, rule: str) -> str:
        return f"arn:aws:events:{self._region}:{self._account}:rule/{rule}"

    def deploy(self, functions: Mapping[str, FunctionSpec]) -> None:
        """The permission SAM makes for each rule and schedule event, once the functions exist."""
        for rule in self._deployment.rules.values():
            self._lambda.add_permission(
                FunctionName=functions[rule.function].name,
                StatementId=f"{rule.name}-Permission",
                Action="lambda:InvokeFunction",
                Principal=EVENTS_PRINCIPAL,
                SourceArn=self.rule_arn(rule.name),
            )

    def submit(self, spec: FunctionSpec, event: Any, source: str) -> None:
        """Deliver ``event`` of the rule or schedule named by ``source`` (``rule:<event>``, ``schedule:<event>``)
        to ``spec``: to Lambda's asynchronous queue when EventBridge may invoke the function, else to the target's
        dead-letter queue."""
        name = source.split(":", 1)[1]
        rule = self._deployment.rules.get((spec.logical_id, name))
        if rule is None:
            self._submit(spec, event, source)
            return
        refusal = self._refusal(spec, self.rule_arn(rule.name))
        if refusal is None:
            self._submit(spec, event, source)
            return
        target = self._deployment.target(spec.logical_id, name) or {"Arn": spec.arn}
        dead_letters = (target.get("DeadLetterConfig") or {}).get("Arn")
        if not dead_letters:
            _log.warning("rule %s: event dropped (%s): %s", rule.name, refusal.code, refusal.message)
            return
        self._send(
            str(dead_letters),
            json.dumps(event),
            {
                "RULE_ARN": self.rule_arn(rule.name),
                "TARGET_ARN": str(target["Arn"]),
                "ERROR_CODE": refusal.code,
                "ERROR_MESSAGE": refusal.message,
            },
        )

    # -- what Lambda says ---------------------------------------------------------------------------

    def _refusal(self, spec: FunctionSpec, rule_arn: str) -> Refusal | None:
        key = f"{spec.name} {rule_arn}"
        with self._lock:
            asking = self._asking.setdefault(key, threading.Lock())
        # One question at a time per rule: a burst of deliveries (a refresh's launches) waits for one answer
        # rather than each asking Lambda (and overflowing the client's connection pool)
        with asking:
            now = time.monotonic()
            with self._lock:
                cached = self._answers.get(key)
            if cached is not None and now - cached[0] < REFRESH_SECONDS:
                return cached[1]
            refusal = self._ask(spec, rule_arn)
            with self._lock:
                self._answers[key] = (now, refusal)
            return refusal

    def _ask(self, spec: FunctionSpec, rule_arn: str) -> Refusal | None:
        missing = self._lambda.exceptions.ResourceNotFoundException
        try:
            self._lambda.get_function(FunctionName=spec.name)
        except missing:
            return Refusal(NO_RESOURCE, f"Function not found: {spec.arn}")
        try:
            policy = json.loads(self._lambda.get_policy(FunctionName=spec.name)["Policy"])
        except missing:
            policy = {}
        if not any(_lets_rule_invoke(s, rule_arn) for s in policy.get("Statement") or []):
            return Refusal(
                NO_PERMISSIONS,
                f"User: {EVENTS_PRINCIPAL} is not authorized to perform: lambda:InvokeFunction on resource: "
                f"{spec.arn} because no resource-based policy allows the lambda:InvokeFunction action",
            )
        return None

    def _send(self, queue_arn: str, body: str, attributes: Mapping[str, str]) -> None:
        _, _, service, _region, account, name = queue_arn.split(":", 5)
        if service != "sqs":
            raise ValueError(f"the sandbox's rules send undelivered events to SQS only, not {queue_arn}")
        url = self._sqs.get_queue_url(QueueName=name, QueueOwnerAWSAccountId=account)["QueueUrl"]
        # EventBridge sends as events.amazonaws.com: the queue's own policy must let it in for this rule, or the
        # event is lost (the rule's InvocationsFailedToBeSentToDlq), as a policy lost or narrowed would have it
        policy = self._sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"]).get("Attributes", {})
        allowed = service_may(
            policy.get("Policy"),
            service=EVENTS_PRINCIPAL,
            action="sqs:SendMessage",
            resource=queue_arn,
            source_arn=attributes["RULE_ARN"],
            source_account=account,
        )
        if not allowed:
            _log.warning(
                "rule %s: event dropped: the policy of its dead-letter queue %s does not let EventBridge send to it",
                attributes["RULE_ARN"],
                queue_arn,
            )
            return
        self._sqs.send_message(
            QueueUrl=url,
            MessageBody=body,
            MessageAttributes={
                key: {"DataType": "String", "StringValue": value} for key, value in attributes.items()
            },
        )


def _listed(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else [str(v) for v in value or ()]


def _lets_rule_invoke(statement: Mapping[str, Any], rule_arn: str) -> bool:
    """Whether one statement of a function's policy lets EventBridge invoke it for ``rule_arn`` (Lambda writes
    ``add-permission``'s source ARN as an ArnLike condition)."""
    if statement.get("Effect") != "Allow":
        return False
    principal = statement.get("Principal")
    services = _listed(principal.get("Service")) if isinstance(principal, dict) else []
    if EVENTS_PRINCIPAL not in services:
        return False
    if not {a.lower() for a in _listed(statement.get("Action"))} & {"lambda:invokefunction", "lambda:*", "*"}:
        return False
    for tests in (statement.get("Condition") or {}).values():
        sources = {key.lower(): value for key, value in (tests or {}).items()}.get("aws:sourcearn")
        if sources is not None and not any(_arn_like(rule_arn, pattern) for pattern in _listed(sources)):
            return False
    return True


def _arn_like(arn: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(arn, pattern)
