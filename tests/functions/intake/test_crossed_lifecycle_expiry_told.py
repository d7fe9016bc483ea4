"""What the expired-actions alarm is told of a crossed lifecycle whose token's action ends. A notification named a
terminating instance with another terminating instance's live token and was taken in first (an Auto Scaling that
takes a call's token alone, as AWS may: it does not say it refuses a token named with another instance, confirms
it). Its drain began; then the token's action ended (completed by the other instance's adopted lifecycle), and the
drain's heartbeat found it gone. The instance's own action is still held by the hook: the cleanup carries the drain
over to it (drain.cleanup ``_carried_over``), and its completion settles it. Nothing was lost, so the page of an
expired action (LifecycleActionsExpired: "a node may have gone undrained") is false there; it is true only when
nothing is left to carry over. Run by the step engine on the real adapters: the sandbox's Auto Scaling (the
lifecycle emulation, told to take a call's token alone) and moto's DynamoDB; the cluster and the budget are the
drain steps' fakes (the node claimed and cordoned by the crossed lifecycle, its slot held)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import boto3
import pytest

from nodecycle.adapters.aws.autoscaling import AutoscalingActions
from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle.adapters.clock import SystemClock
from nodecycle.domain.engine import EngineTiming, Outcome, StepEngine
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import CARRIED_OVER, LifecycleRecord, Step
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.lifecycle import WorkMessage
from nodecycle_sandbox.aws import TERMINATING
from tests.functions.intake.conftest import GROUP
from tests.functions.intake.test_crossed_token_taken_in_second import two_terminating
from tests.functions.intake.test_foreign_and_forged_actions import (
    Sandbox,
    hook_notification,
    sandbox,  # noqa: F401 (the fixture)
)
from tests.support.events import sqs_event
from tests.support.fakes import FakeMetrics, RecordingQueues
from tests.support.functions import LambdaContext
from tests.support.stack import Stack, receive_all
from tests.unit.drain.test_drain_steps import NODE, FakeCluster, FakeSlots, cleanup, node
from tests.unit.foundation.test_engine import Script

MARGIN = timedelta(seconds=60)


def crossed_and_draining(
    box: Sandbox,
) -> tuple[str, str, DynamoRecordStore, LifecycleRecord, FakeCluster]:
    """The first instance taken in under the second's live token, its drain begun (its node claimed and cordoned
    by it), its heartbeat due; the first instance's id, the token's, the table, the record and the cluster."""
    box.control.configure(token_checked_against_instance=False)
    first, second = two_terminating(box)
    other = box.action(second, TERMINATING)
    crossed = hook_notification(first, other.token, datetime.now(UTC) + timedelta(seconds=1))
    assert box.intake.handler(sqs_event(crossed), LambdaContext()) == {"batchItemFailures": []}
    store = DynamoRecordStore("nodecycle-lifecycle", timedelta(days=7))
    (taken,) = [r for r in store.scan("stack-a") if r.instance_id == first]
    now = datetime.now(UTC)
    draining = taken.model_copy(
        update={
            "seq": taken.seq + 1,
            "step": Step.EVICT,
            "node": NODE,
            "zone": "eu-west-1a",
            "drain_started_at": now,
            "drain_deadline": now + timedelta(minutes=10),
            "verified_at": now,
            # (its heartbeat due at this poll: within a margin of its deadline)
            "heartbeat_deadline": now + timedelta(seconds=30),
            "due_at": now,
        }
    )
    assert store.commit(draining, expected_seq=taken.seq)
    started = {"instance": first, "transition": "terminate", "token": other.token, "started": now.isoformat()}
    claimed = node(
        instance_id=first, owner=draining.owner, in_progress=json.dumps(started), unschedulable=True
    )
    return first, other.token, store, draining, FakeCluster(nodes={NODE: claimed}, cordoned={NODE})


def engine_of(
    store: DynamoRecordStore, cluster: FakeCluster, slots: FakeSlots, metrics: FakeMetrics, evict: Script
) -> StepEngine:
    """The drain's step engine on the sandbox's Auto Scaling and moto's table; its eviction scripted, its cleanup
    the real one on the drain steps' fakes."""
    autoscaling = AutoscalingActions()
    return StepEngine(
        worker=Worker.DRAIN,
        steps={
            Step.EVICT: evict,
            Step.CLEANUP: cleanup(cluster, slots, autoscaling, metrics=metrics),  # type: ignore[arg-type]
        },
        records=store,
        queues=RecordingQueues(),
        autoscaling=autoscaling,
        clock=SystemClock(),
        metrics=metrics,
        timing=EngineTiming(
            resume_grace=timedelta(minutes=3),
            heartbeat_margin=MARGIN,
            redelivery=timedelta(0),
            settle_before=MARGIN,
        ),
        failure_result=lambda record: ActionResult.CONTINUE,
    )


def complete(hook: str, **named: str) -> None:
    boto3.client("autoscaling").complete_lifecycle_action(
        AutoScalingGroupName=GROUP, LifecycleHookName=hook, LifecycleActionResult="CONTINUE", **named
    )


@pytest.mark.parametrize("own_action", ["held", "over"])
def test_a_crossed_lifecycle_whose_token_ended_pages_an_expiry_only_when_nothing_is_carried_over(
    sandbox: Sandbox,  # noqa: F811
    stack: Stack,
    own_action: str,
) -> None:
    # Given the crossed lifecycle draining its instance's node in a slot, its heartbeat due at this poll
    first, token, store, draining, cluster = crossed_and_draining(sandbox)
    receive_all(stack.drain_queue)
    slots = FakeSlots(holders={NODE}, held_for={NODE: draining.id}, held_instance={NODE: first})
    # ... the token's action ended since (the other instance's, completed by its adopted lifecycle) ...
    complete(draining.hook, LifecycleActionToken=token)
    if own_action == "over":
        # ... and the first instance's own action too (completed by hand): the hook holds nothing of it
        own = sandbox.action(first, TERMINATING)
        complete(own.hook, LifecycleActionToken=own.token)
    metrics = FakeMetrics()
    evict = Script([Outcome.wait(5), Outcome.wait(5)])

    # When the drain polls (its heartbeat finds the token's action gone; its cleanup runs inline after it)
    engine_of(store, cluster, slots, metrics, evict).handle(
        WorkMessage(record_id=draining.id, seq=draining.seq, step=draining.step)
    )

    # Then with the hook still holding the instance, the drain goes on for the instance's own action, in the slot it
    # holds, and no expiry is paged: the carry-over is counted on its own. With nothing held, the cleanup ends as
    # ever (the claim cleared, the slot given back) and the expiry is paged, once.
    record = store.get(draining.id)
    assert record is not None
    if own_action == "held":
        assert (record.step, record.extra.get(CARRIED_OVER)) == (Step.EVICT, token)
        assert (slots.released, len(evict.runs)) == ([], 2)
        assert metrics.counts["LifecycleActionsExpired"] == 0
        assert metrics.counts["LifecycleActionsCarriedOver"] == 1
    else:
        assert (record.step, record.outcome) == (Step.DONE, "action-expired")
        assert slots.released == [NODE]
        assert metrics.counts["LifecycleActionsExpired"] == 1
        assert metrics.counts["LifecycleActionsCarriedOver"] == 0


def test_a_carried_over_lifecycle_is_guarded_by_a_deadline_no_later_than_its_instances_own_action(
    sandbox: Sandbox,  # noqa: F811
    stack: Stack,
) -> None:
    # Given the crossed lifecycle, dated after its instance's own action started (a crossed message carries the other
    # instance's time, or its sender's), draining; the instance's own event not taken in (lagging, or lost)
    first, token, store, draining, cluster = crossed_and_draining(sandbox)
    own = sandbox.action(first, TERMINATING)
    slots = FakeSlots(holders={NODE}, held_for={NODE: draining.id}, held_instance={NODE: first})
    complete(draining.hook, LifecycleActionToken=token)

    # When its heartbeat finds the token's action gone and its cleanup carries it over to the instance's own action
    engine_of(store, cluster, slots, FakeMetrics(), Script([Outcome.wait(5), Outcome.wait(5)])).handle(
        WorkMessage(record_id=draining.id, seq=draining.seq, step=draining.step)
    )

    # Then the engine's guard (which completes the action a margin before its global timeout, whatever the drain
    # waits for) runs on a clock no later than that action's: Auto Scaling applies the hook's default result at the
    # global timeout of the action it holds, however long the drain
    record = store.get(draining.id)
    assert record is not None
    assert record.extra.get(CARRIED_OVER) == token
    assert record.global_deadline <= datetime.fromtimestamp(own.global_deadline, UTC)
