"""EventBridge sends an event it could not deliver to the target's dead-letter queue as events.amazonaws.com,
which the queue's own policy must let in for that rule (the template's IntakeDeadLetterQueuePolicy and
SweeperDeadLetterQueuePolicy); a queue whose policy does not is sent nothing, and the event is lost (the rule's
InvocationsFailedToBeSentToDlq). The runner sent it with the administrator's client whatever the queue's policy said,
so a policy lost or narrowed (the doctor's dead-letter policy check, tests/functions/test_doctor_dead_letter_policies.py)
was never met by a run; it now asks the queue's policy (``nodecycle_sandbox.iam.resource_policies.service_may``)."""

from __future__ import annotations

import time

from .conftest import MakeRunner
from .test_rule_undeliverable import EVENT, WITHOUT_POLICY, WORKER, messages
from .test_stack_deployment import client


def test_a_dead_letter_queue_whose_policy_does_not_let_eventbridge_in_is_sent_nothing(
    make_runner: MakeRunner,
) -> None:
    # Given a rule's target with a dead-letter queue that has no policy (EventBridge may not send to it), and
    # its function deleted by hand
    runner = make_runner(WITHOUT_POLICY, {"worker": WORKER}, sqs_sources_enabled=False)
    client(runner, "lambda").delete_function(FunctionName=runner.functions["Worker"].name)

    # When an event of the rule comes, Then EventBridge cannot deliver it anywhere: the queue stays empty
    runner.publish(EVENT)
    time.sleep(1.5)
    assert messages(runner, "Undelivered") == []
