"""Nothing is disrupted for a lifecycle action Auto Scaling does not confirm as active: a well-formed hook
notification sent to the intake queue for a live, in-service instance, with a token no hook issued (forged),
or with the token of an action already completed (replayed), leaves the node untouched."""

from __future__ import annotations

import json
import uuid

import pytest

from nodecycle.domain.model import LifecycleRecord, Transition
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.notifications import forged_hook_notification
from nodecycle_sandbox.aws.records import LAUNCHING, TERMINATING
from nodecycle_sandbox.runner.journal import Invocation
from tests.integration.lifecycle.harness import (
    held_by_a_budget,
    node_of,
    records,
    running,
    terminate_action,
    wait_for,
)

pytestmark = pytest.mark.slow


def notify(sandbox: Sandbox, instance: str, token: str, transition: str = TERMINATING) -> None:
    """What anyone with sqs:SendMessage on the intake queue can send: a hook notification, well formed."""
    body = forged_hook_notification(
        account="123456789012",
        group=sandbox.asg.name,
        hook="nodecycle-terminate",
        instance_id=instance,
        transition=transition,
        token=token,
    )
    queue = sandbox.runner.queue("IntakeQueue").url
    sandbox.client("sqs").send_message(QueueUrl=queue, MessageBody=json.dumps(body))


def taken(invocations: list[Invocation], token: str, transition: str) -> bool:
    """Whether one of intake's ``invocations`` from its queue handled the notification of ``token`` as a
    ``transition`` (did not give it back to the queue for another try)."""
    return any(
        (body := json.loads(r["body"])).get("LifecycleActionToken") == token
        and body.get("LifecycleTransition") == transition
        and i.ok
        and r["messageId"] not in i.failures
        for i in invocations
        if isinstance(i.event, dict)
        for r in i.event.get("Records", [])
    )


def finished(sandbox: Sandbox, instance: str, token: str) -> LifecycleRecord:
    store = records(sandbox)
    record_id = f"{instance}/terminate/{token}"
    return wait_for(
        lambda: (r := store.get(record_id)) is not None and r.finished and r,
        60,
        f"the lifecycle of {record_id}",
    )


def test_forged_and_replayed_terminate_notifications_touch_nothing() -> None:
    with running(size=2) as sandbox:
        forged_target, replay_target = sorted(sandbox.asg.in_state("InService"))
        completed_launch = next(
            a for a in sandbox.aws.actions() if a.transition == LAUNCHING and a.instance_id == replay_target
        )
        writes_before = len(sandbox.kube.history())

        # When a notification with a token no hook issued, and one with the token of the instance's
        # (completed) launch action, arrive on the intake queue
        forged_token = str(uuid.uuid4())
        notify(sandbox, forged_target, forged_token)
        notify(sandbox, replay_target, completed_launch.token)

        # Then the forged one's lifecycle ends as an unknown action, with nothing completed; the replayed one is
        # refused at intake (its token is the launch lifecycle's: a token is one action of one instance), nothing
        # written for it
        record = finished(sandbox, forged_target, forged_token)
        assert (record.outcome, record.completed_at) == ("unknown-action", None)
        journal = sandbox.runner.journal
        journal.wait_until(
            lambda: taken(journal.invocations("IntakeFunction"), completed_launch.token, TERMINATING), 30
        )
        assert records(sandbox).get(f"{replay_target}/terminate/{completed_launch.token}") is None
        # And the nodes were never cordoned, annotated or drained; the instances stay in service
        nodes = {node_of(sandbox, forged_target), node_of(sandbox, replay_target)}
        writes = sandbox.kube.history()[writes_before:]
        assert [w for w in writes if w.kind == "Node" and w.name in nodes and w.source == "api"] == []
        assert not any(w.resource == "pods/eviction" for w in writes)
        assert sorted(sandbox.asg.in_state("InService")) == sorted([forged_target, replay_target])
        budget = sandbox.kube.get_object("configmaps", "nodecycle-budget", "kube-system")
        holders = json.loads(budget["data"]["budget.json"])["holders"] if budget else []
        assert holders == []
        assert record.transition is Transition.TERMINATING


def test_a_terminating_instances_action_named_as_a_launch_is_refused_and_the_drain_goes_on() -> None:
    with running(size=2) as sandbox:
        # Given a terminating instance whose drain is held by a pod its budget will not let go
        _, victim = held_by_a_budget(sandbox)
        sandbox.asg.terminate(victim)
        action = wait_for(
            lambda: next(
                (a for a in sandbox.aws.actions() if a.instance_id == victim and a.transition == TERMINATING),
                None,
            ),
            30,
            "the terminate action",
        )

        # When a message names that action (its hook, its instance, its token) as a launch: a launch's plan
        # completes with CONTINUE, which Auto Scaling accepts for the token whatever the message said
        journal = sandbox.runner.journal
        notify(sandbox, victim, action.token, transition=LAUNCHING)
        # (once intake has taken that message: not any intake invocation ending after it was sent, such as the
        # terminate event's own, which may end later than its action appears)
        journal.wait_until(lambda: taken(journal.invocations("IntakeFunction"), action.token, LAUNCHING), 30)

        # Then intake refuses it: no launch lifecycle, and the terminate action is still waiting on the drain
        assert records(sandbox).get(f"{victim}/launch/{action.token}") is None
        terminate = terminate_action(sandbox, victim)
        assert terminate is not None
        assert terminate.active
        assert victim in sandbox.asg.in_state("Terminating:Wait")
