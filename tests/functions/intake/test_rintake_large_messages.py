"""Messages near SQS's size limit on the intake queue (anyone allowed to send to it can write them, 256 KiB and more)
whose one oversized value is what is wrong with them: each is rejected naming its fault in a log line of a
readable size, not one as large as the message. CloudWatch Logs keeps an event of at most 256 KB: a longer line
is cut, and with it the JSON of the structured line (its reason and message id after the message), so the error
would name nothing. The values a refusal quotes of a field are cut already (``_SHOWN``); these are the others."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from tests.functions.intake.test_intake_function import records
from tests.functions.intake.test_rintake_deliveries import hook_notification
from tests.support.emf import metric
from tests.support.events import sqs_event
from tests.support.functions import LambdaContext
from tests.support.stack import Stack

LIMIT = 256 * 1024  # bytes of the largest message the tests send: SQS's limit of old (it takes 1 MiB now)
LINE_MAX = 4096  # a log line this long says what it must; one as long as the message says nothing more


def lifecycle_event(**fields: Any) -> dict[str, Any]:
    """An EventBridge lifecycle action's envelope with ``fields`` changed."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "source": "aws.autoscaling",
        "detail-type": "EC2 Instance-terminate Lifecycle Action",
        "account": "123456789012",
        "time": "2026-11-30T10:00:00Z",
        "region": "eu-west-1",
        "resources": [],
        "detail": {},
        **fields,
    }


def redriven(payload: dict[str, Any]) -> dict[str, Any]:
    """The on-failure record Lambda writes for an event whose invocations all failed, carrying ``payload``."""
    return {"requestContext": {"condition": "RetriesExhausted"}, "requestPayload": payload}


# Bodies each oversized in one value (made of the value given): the rejection's reason (None: acknowledged as no
# disruption, quietly), and what its line must name
CASES: dict[str, tuple[Callable[[str], dict[str, Any]], str | None, str]] = {
    "source": (lambda long: lifecycle_event(source=long), "wrong-source", "source"),
    "detail-type": (
        lambda long: lifecycle_event(**{"detail-type": long}),
        "unsupported-detail-type",
        "detail-type",
    ),
    "a key of a body of neither shape": (lambda long: {long: 1}, "unknown-shape", "keys"),
    "a key of a redriven payload": (lambda long: redriven({long: 1}), "unknown-shape", "requestPayload"),
    "the id of a redriven event": (lambda long: redriven(lifecycle_event(id=long)), "invalid-field", "id"),
    "transition": (
        lambda long: hook_notification(LifecycleTransition=long),
        "unknown-transition",
        "LifecycleTransition",
    ),
    "the group of a test notification": (
        lambda long: {
            "Event": "autoscaling:TEST_NOTIFICATION",
            "Service": "AWS Auto Scaling",
            "AutoScalingGroupName": long,
            "Time": "2026-11-30T10:00:00.000Z",
        },
        "invalid-field",
        "AutoScalingGroupName",
    ),
    "the state of a state change": (
        lambda long: lifecycle_event(
            source="aws.ec2",
            **{"detail-type": "EC2 Instance State-change Notification"},
            detail={"instance-id": "i-0123456789abcdef0", "state": long},
        ),
        None,
        "i-0123456789abcdef0",
    ),
}


def at_the_limit(make: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """The body ``make`` writes with its one value as long as makes the message LIMIT bytes."""
    return make("x" * (LIMIT - len(json.dumps(make("")))))


def log_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("case", list(CASES))
def test_a_message_near_the_queues_limit_is_rejected_naming_its_fault_in_a_line_of_readable_size(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    # Given a message of SQS's old limit, 256 KiB, whose one oversized value is what is wrong with it
    make, reason, named = CASES[case]
    body = at_the_limit(make)
    assert len(json.dumps(body)) == LIMIT

    # When intake takes in the batch it is in
    response = intake_fn.handler(sqs_event(body), LambdaContext())

    # Then it is rejected (not retried), by its reason, and nothing is taken in for it
    assert response == {"batchItemFailures": []}
    assert records() == []
    output = capsys.readouterr().out
    # ...each line of it whole and of a size a log keeps (a line as long as the message is past CloudWatch Logs'
    # 256 KB for an event, and cut: the JSON of the line with it)
    lines = log_lines(output)
    assert all(len(line) < LINE_MAX for line in lines), [len(line) for line in lines]
    said = [json.loads(line) for line in lines]
    if reason is None:
        assert [line for line in said if line.get("level") in ("WARNING", "ERROR")] == []
        assert any(named in line.get("message", "") for line in said)
        return
    assert metric(output, "LifecycleEventsRejected", reason=reason) == 1
    # ...in an error line that names the fault, with its reason and message id
    (error,) = [line for line in said if line.get("level") == "ERROR"]
    assert named in error["message"]
    assert error["reason"] == reason
    assert error["message_id"] == "message-0"
