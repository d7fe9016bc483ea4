"""A burst of lifecycle actions that arrives on both of intake's sources (EventBridge and the intake queue)
takes more than intake's reserved concurrency: Lambda throttles the rest (``runner/concurrency.py``), and no
action may be lost, dead-lettered, completed by mistake or left waiting for it."""

from __future__ import annotations

import time

import pytest

from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.records import LAUNCHING, TERMINATING, ActionRecord
from nodecycle_sandbox.checks import unsettled
from nodecycle_sandbox.runner.lambda_functions import REFRESH_SECONDS
from tests.integration.lifecycle.harness import running, wait_for

pytestmark = pytest.mark.slow

SIZE = 10
LOWERED = 4  # intake's reserved concurrency, lowered by hand (the template's is 10)
WIDE_BUDGET = {
    "BudgetMaxUnavailable": "100%",
    "BudgetMaxUnavailablePerZone": "100%",
    "DrainConcurrency": "10",
}


def _settled_terminations(sandbox: Sandbox, instances: set[str]) -> list[ActionRecord] | None:
    settled = [
        a for a in sandbox.asg.actions(transition=TERMINATING) if a.instance_id in instances and not a.active
    ]
    return settled if len(settled) == len(instances) else None


def _intake_queue_empty(sandbox: Sandbox) -> bool:
    runner = sandbox.runner
    counts = runner.sqs.get_queue_attributes(
        QueueUrl=runner.queue("IntakeQueue").url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return not any(int(count) for count in counts.values())


def test_a_burst_that_throttles_intake_loses_no_lifecycle_action() -> None:
    # Given a group whose hooks notify EventBridge and the intake queue, and EventBridge's events free to take
    # all of intake's reserved concurrency, as Lambda lets them: its queue mapping competes for the same. An
    # operator has lowered it from the template's 10 to 4 (put-function-concurrency, as in an incident): with 10, a
    # burst of ten terminations throttled intake only while their invocations overlapped enough, which a fresh-clone
    # run once did not (no throttle, so nothing of what this test is about was exercised); with 4, any five at once
    with running(
        size=SIZE, workloads=None, hook_target="sqs", async_concurrency=5, parameters=WIDE_BUDGET
    ) as sandbox:
        runner = sandbox.runner
        old = set(sandbox.asg.in_state("InService"))
        sandbox.client("lambda").put_function_concurrency(
            FunctionName=runner.functions["IntakeFunction"].name, ReservedConcurrentExecutions=LOWERED
        )
        time.sleep(
            REFRESH_SECONDS + 0.2
        )  # (Lambda applies it within seconds: the runner reads it each second)

        # When every instance terminates at once
        sandbox.asg.set_desired(0)
        terminations = wait_for(
            lambda: _settled_terminations(sandbox, old), 180, "every terminate action settled"
        )
        wait_for(lambda: _intake_queue_empty(sandbox), 60, "the intake queue emptied")

        # Then intake was throttled (its launches' and terminations' bursts) and gave up no throttled event
        # (all were tried again); every launch and terminate action was completed by a call before its global
        # timeout, and nothing went to intake's dead-letter queue
        throttles = runner.journal.throttles("IntakeFunction")
        assert throttles
        assert {t.outcome for t in throttles} == {"retry"}
        launches = [a for a in sandbox.asg.actions(transition=LAUNCHING) if a.instance_id in old]
        assert len(launches) == SIZE
        assert unsettled([*launches, *terminations]) == []
        dead = runner.sqs.receive_message(QueueUrl=runner.queue("IntakeDeadLetterQueue").url)
        assert dead.get("Messages", []) == []
