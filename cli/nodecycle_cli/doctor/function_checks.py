"""The stack's functions as Lambda runs them now: not throttled to nothing, their SQS mappings enabled.

An operator stops a function by hand, in an emergency, with ``aws lambda put-function-concurrency
--reserved-concurrent-executions 0`` (every invocation throttled) or ``aws lambda update-event-source-mapping
--no-enabled`` (its queue no longer polled). Both are meant to be undone, and neither is by ``sam deploy``
(CloudFormation does not notice a change made outside it). Left in place, the function does nothing while its
rule and queue look healthy: lifecycle actions wait for their heartbeat timeout, the queue's age alarm comes
late (and the intake function's throttled events are lost after an hour). The doctor says so, with the
command that undoes it.
"""

from __future__ import annotations

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
# The functions that read a queue through an event source mapping
MAPPED = ("intake", "drain", "wake", "eip")
PURPOSES = {
    "intake": "no lifecycle action is taken in: each waits for its hook's heartbeat timeout",
    "drain": "no node is drained: terminating instances wait for their hook's heartbeat timeout",
    "wake": "a freed budget slot is no longer handed to its waiter at once",
    "eip": "launching instances get no Elastic IP and terminating ones keep theirs",
    "sweeper": "nothing repairs lost lifecycles or frees stale slots and addresses",
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
                f"set by hand (an emergency stop), not undone: {PURPOSES[what]}; sam deploy does not undo it",
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


def _template_concurrency(what: str, parameters: Mapping[str, str]) -> str:
    try:
        return str(reserved_concurrency(what, parameters))
    except (KeyError, ValueError):
        return f"<the stack's {RESERVED_CONCURRENCY[what]}>"
