"""The stack's functions as Lambda runs them now: not throttled to nothing, their SQS mappings enabled.

An operator stops a function by hand, in an emergency, with ``aws lambda put-function-concurrency
--reserved-concurrent-executions 0`` (every invocation throttled) or ``aws lambda update-event-source-mapping
--no-enabled`` (its queue no longer polled). Both are meant to be undone, and neither is by ``sam deploy``
(CloudFormation does not notice a change made outside it). Left in place, the function does nothing while its
rule and queue look healthy: lifecycle actions wait for their heartbeat timeout, the queue's age alarm comes
late, and every event of a rule (intake's, the sweeper's schedule) goes at once to its dead-letter queue, never
to be run (Lambda sends an asynchronous event for a function stopped at 0 to its on-failure destination at once,
condition ``ZeroReservedConcurrency``, instead of keeping it for later). The doctor says so, with the command
that undoes it.

Each function also logs into a group of the stack's (its LoggingConfig's), which its role may write to but not
create: deleted by hand, Lambda drops what the function writes until the group is made again (the runbook's
``aws logs tail`` finds nothing to read), and ``sam deploy`` does not make it.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping
from typing import Any

from nodecycle_cli.doctor.findings import Finding

# The functions the stack's outputs name (by the doctor's name for each), with the reserved concurrency
# template.yaml gives each: a number, or the parameter that holds it (tests/functions/test_doctor_functions.py
# keeps them in step with the template)
FUNCTION_OUTPUTS = {
    "intake": "IntakeFunctionName",
    "drain": "DrainFunctionName",
    "wake": "WakeFunctionName",
    "eip": "EipFunctionName",
    "sweeper": "SweeperFunctionName",
}
RESERVED_CONCURRENCY: dict[str, int | str] = {
    "intake": 10,
    "drain": "DrainConcurrency",
    "wake": "WakeConcurrency",
    "eip": 10,
    "sweeper": 1,
}
# The log group of each function, by the output that names it (the functions' roles may not create one)
LOG_GROUP_OUTPUTS = {
    "intake": "IntakeLogGroupName",
    "drain": "DrainLogGroupName",
    "wake": "WakeLogGroupName",
    "eip": "EipLogGroupName",
    "sweeper": "SweeperLogGroupName",
}
# The functions that read a queue through an event source mapping
MAPPED = ("intake", "drain", "wake", "eip")
PURPOSES = {
    "intake": "no lifecycle action is taken in: each waits for its hook's heartbeat timeout",
    "drain": "no node is drained: terminating instances wait for their hook's heartbeat timeout",
    "wake": "a freed budget slot is no longer handed to its waiter at once",
    "eip": "launching instances get no Elastic IP and terminating ones keep theirs",
    "sweeper": "nothing repairs lost lifecycles or frees stale slots and addresses",
}


# What becomes of the events of a function invoked asynchronously (its rules) while it is stopped at 0: Lambda
# sends each to its on-failure destination at once, not run once the concurrency is back
STOPPED_EVENTS = {
    "intake": ". Each lifecycle event goes at once to the intake dead-letter queue (ZeroReservedConcurrency), "
    "not to be run later; the sweeper adopts the open actions meanwhile: docs/runbook.md#intake-dead-letters",
    "sweeper": ". Each firing of its schedule goes at once to the sweeper dead-letter queue "
    "(ZeroReservedConcurrency), not to be run later: docs/runbook.md#sweeper-not-running",
}


def reserved_concurrency(what: str, parameters: Mapping[str, str]) -> int:
    """The reserved concurrency the deployed template gives the function (its parameter's value, if any)."""
    declared = RESERVED_CONCURRENCY[what]
    if isinstance(declared, int):
        return declared
    return int(parameters[declared])


def functions(lambda_: Any, names: Mapping[str, str], parameters: Mapping[str, str]) -> list[Finding]:
    findings = []
    for what, name in names.items():
        findings += function(lambda_, what, name, parameters)
    return findings


def function(lambda_: Any, what: str, name: str, parameters: Mapping[str, str]) -> list[Finding]:
    """One function: that it exists, is not throttled to nothing, and (for those that read a queue) that its
    mappings are enabled."""
    check = f"lambda.function.{what}"
    try:
        reserved = lambda_.get_function_concurrency(FunctionName=name).get("ReservedConcurrentExecutions")
    except Exception as error:
        if getattr(error, "response", {}).get("Error", {}).get("Code") != "ResourceNotFoundException":
            raise
        return [
            Finding.problem(
                check,
                f"function {name} ({what}) does not exist",
                f"it was deleted outside the stack: {PURPOSES[what]}. sam deploy does not bring it back",
                "docs/runbook.md#resources-deleted-outside-the-stack",
            )
        ]
    findings = []
    if reserved == 0:
        findings.append(
            Finding.problem(
                f"{check}.concurrency",
                f"function {name} ({what}) has a reserved concurrency of 0: every invocation is throttled",
                f"set by hand (an emergency stop), not undone: {PURPOSES[what]}; sam deploy does not undo it"
                + STOPPED_EVENTS.get(what, ""),
                f"aws lambda put-function-concurrency --function-name {name} --reserved-concurrent-executions "
                f"{_template_concurrency(what, parameters)}",
            )
        )
    else:
        findings.append(Finding.ok(f"{check}.concurrency", f"function {name} ({what}) may run"))
    if what in MAPPED:
        findings += _mappings(lambda_, what, name)
    return findings


def _mappings(lambda_: Any, what: str, name: str) -> list[Finding]:
    check = f"lambda.function.{what}.mapping"
    pages = lambda_.get_paginator("list_event_source_mappings").paginate(FunctionName=name)
    mappings = [m for page in pages for m in page["EventSourceMappings"]]
    if not mappings:
        return [
            Finding.problem(
                check,
                f"function {name} ({what}) has no event source mapping: nothing reads its queue",
                f"deleted outside the stack: {PURPOSES[what]}. sam deploy does not bring it back",
                "docs/runbook.md#resources-deleted-outside-the-stack",
            )
        ]
    findings = []
    for mapping in mappings:
        queue = str(mapping.get("EventSourceArn", "")).rsplit(":", 1)[-1]
        state = str(mapping.get("State", ""))
        if state in ("Enabled", "Enabling", "Updating", "Creating"):
            findings.append(Finding.ok(check, f"function {name} ({what}) reads queue {queue} ({state})"))
            continue
        findings.append(
            Finding.problem(
                check,
                f"function {name} ({what}): its mapping of queue {queue} is {state}",
                f"disabled by hand (an emergency stop), not undone: {PURPOSES[what]}, "
                "the messages wait in the queue; sam deploy does not undo it",
                f"aws lambda update-event-source-mapping --uuid {mapping['UUID']} --enabled",
            )
        )
    return findings


def log_group(logs: Any, what: str, group: str, parameters: Mapping[str, str]) -> list[Finding]:
    """The function's log group is there: deleted by hand, the function's output is dropped (Lambda writes with the
    function's role, which may not create it), and the fix makes it again with the stack's retention."""
    check = f"logs.group.{what}"
    pages = logs.get_paginator("describe_log_groups").paginate(logGroupNamePrefix=group)
    if any(g["logGroupName"] == group for page in pages for g in page["logGroups"]):
        return [Finding.ok(check, f"log group {group} ({what}) exists")]
    retention = parameters.get("LogRetentionDays") or "<the stack's LogRetentionDays>"
    return [
        Finding.problem(
            check,
            f"log group {group} ({what}) does not exist",
            "deleted outside the stack: Lambda drops what the function logs (its role may write there, not create "
            "the group), so the runbook's aws logs tail reads nothing; sam deploy does not make it again: "
            "docs/runbook.md#resources-deleted-outside-the-stack",
            f"aws logs create-log-group --log-group-name {group} && aws logs put-retention-policy "
            f"--log-group-name {group} --retention-in-days {retention}",
        )
    ]


def _template_concurrency(what: str, parameters: Mapping[str, str]) -> str:
    try:
        return str(reserved_concurrency(what, parameters))
    except (KeyError, ValueError):
        return f"<the stack's {RESERVED_CONCURRENCY[what]}>"


EVENTS_PRINCIPAL = "events.amazonaws.com"


def rule_permission(lambda_: Any, what: str, function: str, rule: str, rule_arn: str) -> list[Finding]:
    """The function lets the rule invoke it (the ``AWS::Lambda::Permission`` SAM makes of the rule's event). Removed
    by hand (``aws lambda remove-permission``, a policy rewritten), EventBridge's call is refused and each event goes
    straight to the rule's dead-letter queue, not retried (its ``ERROR_CODE`` ``NO_PERMISSIONS``): the rule, its
    target and the function all look healthy, and only the dead-letter alarm tells. ``sam deploy`` does not put it
    back. Nothing is said when the function is gone (its own finding says so) or its policy cannot be read."""
    check = f"eventbridge.rule.{what}.permission"
    try:
        policy = json.loads(lambda_.get_policy(FunctionName=function)["Policy"])
    except Exception as error:
        if getattr(error, "response", {}).get("Error", {}).get("Code") != "ResourceNotFoundException":
            raise
        try:
            lambda_.get_function(FunctionName=function)
        except Exception as missing:
            if getattr(missing, "response", {}).get("Error", {}).get("Code") == "ResourceNotFoundException":
                return []  # the function is gone: lambda.function.* says so
            raise
        policy = {}
    statements = policy.get("Statement") or []
    if any(
        _lets_rule_invoke(s, rule_arn) for s in (statements if isinstance(statements, list) else [statements])
    ):
        return [Finding.ok(check, f"function {function} lets rule {rule} ({what}) invoke it")]
    return [
        Finding.problem(
            check,
            f"function {function} does not let EventBridge rule {rule} ({what}) invoke it (its resource policy has no "
            f"lambda:InvokeFunction for {EVENTS_PRINCIPAL} on the rule)",
            "EventBridge's every call is refused: each event goes to the rule's dead-letter queue at once, not "
            "retried (ERROR_CODE NO_PERMISSIONS), and the function never sees it; sam deploy does not put the "
            "permission back. Once it is back, see to what the dead-letter queue kept: "
            + (
                "docs/runbook.md#sweeper-dead-letters"
                if what == "sweeper schedule"
                else "docs/runbook.md#intake-dead-letters"
            ),
            f"aws lambda add-permission --function-name {function} --statement-id {rule}-Permission --action "
            f"lambda:InvokeFunction --principal {EVENTS_PRINCIPAL} --source-arn {rule_arn}",
        )
    ]


def _listed(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else [v for v in value or () if isinstance(v, str)]


def _lets_rule_invoke(statement: Any, rule_arn: str) -> bool:
    """Whether one statement of a function's policy lets EventBridge invoke it for ``rule_arn``. A condition on
    anything but the source ARN is taken as met (the doctor says what surely refuses, not what it cannot tell)."""
    if not isinstance(statement, dict) or statement.get("Effect") != "Allow":
        return False
    principal = statement.get("Principal")
    anyone = principal == "*" or (isinstance(principal, dict) and principal.get("AWS") == "*")
    services = _listed(principal.get("Service")) if isinstance(principal, dict) else []
    if not anyone and EVENTS_PRINCIPAL not in services:
        return False
    if not {a.lower() for a in _listed(statement.get("Action"))} & {"lambda:invokefunction", "lambda:*", "*"}:
        return False
    for operator, tests in (statement.get("Condition") or {}).items():
        sources = {key.lower(): value for key, value in (tests or {}).items()}.get("aws:sourcearn")
        if sources is None:
            continue
        if operator in ("ArnEquals", "StringEquals") and rule_arn not in _listed(sources):
            return False
        if operator in ("ArnLike", "StringLike") and not any(
            fnmatch.fnmatchcase(rule_arn, p) for p in _listed(sources)
        ):
            return False
    return True
