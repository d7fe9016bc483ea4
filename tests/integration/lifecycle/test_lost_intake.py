"""A lifecycle action whose event never became a record (intake failed for all its retries and the event went
to the intake dead-letter queue) is adopted by the sweeper: drained (or gated) and completed by nodecycle, not
by the hook's default result. The event redriven from the dead-letter queue later starts no second
lifecycle."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nodecycle.domain.model import Transition, adopted_token
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.group import wait_for
from nodecycle_sandbox.aws.records import LAUNCHING, TERMINATING
from nodecycle_sandbox.checks import completed_before_drained
from nodecycle_sandbox.faults import Fault
from tests.integration.lifecycle.harness import (
    find_record,
    node_of,
    records,
    swept_every_two_seconds,
    wait_terminated,
)

pytestmark = pytest.mark.slow

HEARTBEAT_TIMEOUT = 15


def dead_letters(sandbox: Sandbox) -> list[Any]:
    runner = sandbox.runner
    found = runner.sqs.receive_message(
        QueueUrl=runner.queue("IntakeDeadLetterQueue").url,
        MaxNumberOfMessages=10,
        VisibilityTimeout=0,
        WaitTimeSeconds=1,
    )
    return found.get("Messages", [])


def dead_letter_of(sandbox: Sandbox, instance: str) -> Any:
    """The dead letter of the instance's terminate event, once it is there. Not the first dead letter: the
    replacement's launch event fails as the terminate event does, and can reach the queue first."""
    for message in dead_letters(sandbox):
        detail = json.loads(message["Body"])["requestPayload"].get("detail") or {}
        if (detail.get("EC2InstanceId"), detail.get("LifecycleTransition")) == (instance, TERMINATING):
            return message
    return None


def launch_dead_lettered(sandbox: Sandbox, initial: set[str]) -> bool:
    """Whether the launch event of an instance not among ``initial`` (the replacement) is dead-lettered."""
    for message in dead_letters(sandbox):
        detail = json.loads(message["Body"])["requestPayload"].get("detail") or {}
        if detail.get("LifecycleTransition") == LAUNCHING and detail.get("EC2InstanceId") not in initial:
            return True
    return False


def test_the_sweeper_adopts_a_terminate_action_whose_event_intake_dead_lettered() -> None:
    # Given hooks with a 15 s heartbeat timeout (the terminate hook's default result CONTINUE), a sweeper
    # every 2 s, and DynamoDB refusing every call of the intake function (the table's KMS key denied to its
    # role: refused at once, where a 5xx or throttling costs each attempt seconds of botocore's backoff)
    with swept_every_two_seconds(HEARTBEAT_TIMEOUT) as sandbox:
        initial = set(sandbox.asg.in_state("InService"))
        victim = sorted(initial)[0]
        node = node_of(sandbox, victim)
        sandbox.aws.arm_faults(
            faults=[Fault("down", "aws-denied", target="dynamodb.*")],
            seed=1,
            callers=[sandbox.runner.access_key("IntakeFunction")],
        )

        # When the instance terminates and intake fails all three attempts (for its replacement's launch too):
        # the event goes to its dead-letter queue, and no record of the action exists
        sandbox.asg.terminate(victim)
        dead = wait_for(lambda: dead_letter_of(sandbox, victim), 200, "the terminate event's dead letter")
        # (and the replacement's launch event's: on a loaded machine it may come seconds later, and taken in
        # once the refusals end it would be intake's, not the sweeper's to adopt)
        wait_for(lambda: launch_dead_lettered(sandbox, initial), 200, "the launch event's dead letter")
        sandbox.aws.disarm_faults()
        assert find_record(sandbox, victim) is None

        # Then the node is drained and the action completed by nodecycle, not by the hook's default result
        done = wait_terminated(sandbox, victim, timeout=90)
        assert (done.outcome, done.completed_by is not None) == ("completed", True)
        assert completed_before_drained(sandbox.kube.history(), [done]) == []
        assert sandbox.kube.node_for_instance(victim) in (node, None)
        # by the lifecycle the sweeper adopted, under this stack's hook, which then ends (its cleanup comes
        # after the completion: a moment later, not at once)
        store, adopted_id = records(sandbox), f"{victim}/terminate/{adopted_token(done.hook)}"
        assert store.get(adopted_id) is not None
        wait_for(lambda: (r := store.get(adopted_id)) is not None and r.finished, 30, "the adopted lifecycle")
        # and the replacement's launch action too: through the readiness gate, completed with CONTINUE
        launched = wait_for(
            lambda: [
                a
                for a in sandbox.aws.actions()
                if a.transition == LAUNCHING and a.instance_id not in initial and not a.active
            ],
            60,
            "the replacement's launch action",
        )
        assert [(a.outcome, a.result, a.completed_by is not None) for a in launched] == [
            ("completed", "CONTINUE", True)
        ]

        def adoptions() -> int:
            """The lifecycles adopted, as the sweeps that have ended say (the one that adopted the launch may
            still be sending its work when that launch is completed)."""
            sweeps = sandbox.runner.journal.invocations("SweeperFunction")
            return sum((s.response or {}).get("LifecyclesAdopted", 0) for s in sweeps)

        wait_for(lambda: adoptions() >= 2, 30, "the sweeps that adopted both actions")
        assert adoptions() == 2

        # When the dead letter is redriven as the runbook says: sent back to the intake queue as it is, the
        # on-failure record Lambda wrote (a message move task; EventBridge would refuse its aws.* event put
        # back on the bus by anyone but AWS)
        intakes = len(sandbox.runner.journal.invocations("IntakeFunction"))
        runner = sandbox.runner
        runner.sqs.send_message(QueueUrl=runner.queue("IntakeQueue").url, MessageBody=dead["Body"])

        # Then intake takes it in from the queue without failing it, and it starts no second lifecycle
        redriven = wait_for(
            lambda: [
                i
                for i in runner.journal.invocations("IntakeFunction")[intakes:]
                if i.source == "sqs:IntakeQueue" and i.finished_at
            ],
            30,
            "the redriven dead letter",
        )
        assert [(i.ok, (i.response or {}).get("batchItemFailures")) for i in redriven] == [(True, [])]
        # as the action it carries, looked up in the records (a record rejected unread makes no call at all)
        assert any(call.startswith("dynamodb.") for call in redriven[0].api_calls), redriven[0].api_calls
        assert find_record(sandbox, victim, Transition.TERMINATING) is None
