"""EventBridge sends an event it could not deliver to the target's dead-letter queue as events.amazonaws.com,
which the queue's own policy must let in for that rule (the template's IntakeDeadLetterQueuePolicy and
SweeperDeadLetterQueuePolicy); a queue whose policy does not is sent nothing, and the event is lost (the rule's
InvocationsFailedToBeSentToDlq). The runner sends it with the administrator's client whatever the queue's policy
says, so a policy lost or narrowed (the doctor's dead-letter policy check, tests/functions/test_doctor_dead_letter_policies.py)
is never met by a run.

The fix belongs to the runner (``runner/rule_targets.py``, ``_send``: read the queue's ``Policy`` attribute and
send only when ``nodecycle_sandbox.iam.resource_policies.service_may`` allows ``sqs:SendMessage`` for
``events.amazonaws.com`` with the rule's ARN and account, otherwise drop it with a warning; the test template of
tests/sandbox/runner/test_rule_undeliverable.py then needs the queue policy the template writes), hence the strict
xfail."""

from __future__ import annotations

import time

import pytest

from .conftest import MakeRunner
from .test_rule_undeliverable import EVENT, TEMPLATE, WORKER, messages
from .test_stack_deployment import client


@pytest.mark.xfail(
    strict=True,
    reason="rule_targets sends to a dead-letter queue with the administrator's client, whatever the queue's policy",
)
def test_a_dead_letter_queue_whose_policy_does_not_let_eventbridge_in_is_sent_nothing(
    make_runner: MakeRunner,
) -> None:
    # Given a rule's target with a dead-letter queue that has no policy (EventBridge may not send to it), and
    # its function deleted by hand
    runner = make_runner(TEMPLATE, {"worker": WORKER}, sqs_sources_enabled=False)
    client(runner, "lambda").delete_function(FunctionName=runner.functions["Worker"].name)

    # When an event of the rule comes, Then EventBridge cannot deliver it anywhere: the queue stays empty
    runner.publish(EVENT)
    time.sleep(1.5)
    assert messages(runner, "Undelivered") == []
