"""The sweep's keep-alive of an action no step confirmed, while the look where its instance is fails.

The look (DescribeAutoScalingInstances, ``AutoscalingActions.confirm``) is what keeps a lifecycle whose message named
this stack's group with another group's token (another stack's action, in the same account) from heartbeating that
action: AWS does not document that a heartbeat naming a group with another group's token is refused. While the look
fails (throttled past the client's retries, denied), the sweep heartbeats the action all the same, lest a stalled
queue's actions lapse (invariant 11): named by its token, that heartbeat reached the other stack's action at every
sweep, which then held its node past its own hook's heartbeat timeout (invariant 8: nothing of this stack acts on an
action Auto Scaling does not confirm as its own). Named by the group, hook and instance, it reaches only an action
this stack's hook holds for that instance. On the real adapter, over the sandbox's Auto Scaling told to take a token
alone whatever group is named (the harsher reading of what AWS does not document)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders
from botocore.config import Config

from nodecycle.adapters.aws.autoscaling import AutoscalingActions
from nodecycle.domain.completion import CompleteAction
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.model import Step
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.sweep.lifecycles import LifecycleRepair
from nodecycle.domain.sweep.sweeper import SweepFailed
from nodecycle_sandbox.aws import TERMINATING
from nodecycle_sandbox.aws.group import AutoScalingGroup
from tests.integration.owners.test_tokens_of_another_group import _in_service
from tests.sandbox.aws.conftest import OPERATOR_KEY, REGION, Emulation, aws  # noqa: F401
from tests.support.fakes import FakeClock, FakeMetrics, InMemoryRecords, RecordingQueues
from tests.unit.foundation.test_engine import PLAN, make_record
from tests.unit.sweeper.test_orphans import AMPLE

INTERVAL = timedelta(minutes=5)
MARGIN = timedelta(seconds=60)


@pytest.fixture
def looks_fail(aws: Emulation) -> Any:  # noqa: F811
    """An Auto Scaling client (no retries: each refusal at once) whose DescribeAutoScalingInstances is throttled."""
    client = boto3.client(
        "autoscaling",
        region_name=REGION,
        aws_access_key_id=OPERATOR_KEY,
        aws_secret_access_key="testing",
        config=Config(retries={"mode": "standard", "max_attempts": 1}),
    )

    def throttled(model: Any, **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        if model.name != "DescribeAutoScalingInstances":
            return None
        error = {"Code": "Throttling", "Message": "Rate exceeded"}
        return AWSResponse("https://autoscaling", 400, HTTPHeaders(), None), {
            "Error": error,
            "ResponseMetadata": {},
        }

    client.meta.events.register("before-call.autoscaling.*", throttled)  # type: ignore[arg-type]
    return client


def _repair(records: InMemoryRecords, port: AutoscalingActions, clock: FakeClock) -> LifecycleRepair:
    metrics = FakeMetrics()
    return LifecycleRepair(
        records=records,
        dispatcher=Dispatcher(records=records, queues=RecordingQueues(), clock=clock, metrics=metrics),
        autoscaling=port,
        completion=CompleteAction(port, metrics, records),
        metrics=metrics,
        resume_grace=timedelta(minutes=3),
        margin=MARGIN,
        interval=INTERVAL,
        settle_before=INTERVAL + 2 * MARGIN,
        lateness=timedelta(seconds=60),  # (the schedule's minute, as settings reckon it)
        failure_result=lambda record: ActionResult.CONTINUE,
        clock=clock,
    )


def _theirs_terminating(aws: Emulation) -> tuple[AutoScalingGroup, str, str]:  # noqa: F811
    """Stack A's group workers-a, stack B's workers-b (the same hook names), and an instance of workers-b its terminate
    hook holds: the group, the instance and the action's token."""
    _in_service(aws, "workers-a", 1)
    theirs = _in_service(aws, "workers-b", 1)
    (victim,) = theirs.in_state("InService")
    theirs.terminate(victim)
    (held,) = [a for a in theirs.actions(transition=TERMINATING) if a.active]
    return theirs, victim, held.token


def test_a_record_naming_another_groups_token_does_not_keep_that_action_alive_while_the_look_fails(
    aws: Emulation,  # noqa: F811
    looks_fail: Any,
) -> None:
    # Given an Auto Scaling that takes a call's token alone whatever group is named, stack B's instance held by
    # workers-b's terminate hook, and stack A's lifecycle of a message that named workers-a with that instance and
    # token (forged, or sent to A's queue by mistake), no step of it run (its queue stalled), its heartbeat due
    aws.control.configure(token_checked_against_group=False)
    theirs, victim, token = _theirs_terminating(aws)
    now = datetime.now(UTC)
    forged = make_record(
        PLAN,
        Step.ACQUIRE_SLOT,
        id=f"{victim}/terminate/{token}",
        instance_id=victim,
        token=token,
        group="workers-a",
        hook="nodecycle-terminate",
        verified_at=None,
        received_at=now,
        started_at=now,
        updated_at=now,
        due_at=now + timedelta(minutes=1),
        heartbeat_timeout=60,
        heartbeat_deadline=now + timedelta(seconds=60),
        global_deadline=now + timedelta(hours=2),
    )
    records = InMemoryRecords()
    assert records.create(forged)
    clock = FakeClock(now)

    # When a sweep runs while Auto Scaling throttles the look where an instance is
    with pytest.raises(SweepFailed):
        _repair(records, AutoscalingActions(looks_fail), clock)(
            list(records.open_records("stack-a")), now, AMPLE
        )

    # Then workers-b's action was not heartbeated for A's lifecycle (before: once a sweep, by its token)
    (action,) = theirs.actions(transition=TERMINATING)
    assert (action.active, action.heartbeats) == (True, [])


def test_this_stacks_own_unconfirmed_action_is_still_kept_alive_by_its_instance_while_the_look_fails(
    aws: Emulation,  # noqa: F811
    looks_fail: Any,
) -> None:
    # Given stack A's own instance held by workers-a's terminate hook, and its lifecycle, no step of it run (its queue
    # stalled), its heartbeat due
    aws.control.configure(token_checked_against_group=False)
    ours = _in_service(aws, "workers-a", 1)
    (instance,) = ours.in_state("InService")
    ours.terminate(instance)
    (held,) = [a for a in ours.actions(transition=TERMINATING) if a.active]
    now = datetime.now(UTC)
    record = make_record(
        PLAN,
        Step.ACQUIRE_SLOT,
        id=f"{instance}/terminate/{held.token}",
        instance_id=instance,
        token=held.token,
        group="workers-a",
        hook="nodecycle-terminate",
        verified_at=None,
        received_at=now,
        started_at=now,
        updated_at=now,
        due_at=now + timedelta(minutes=1),
        heartbeat_timeout=60,
        heartbeat_deadline=now + timedelta(seconds=60),
        global_deadline=now + timedelta(hours=2),
    )
    records = InMemoryRecords()
    assert records.create(record)

    # When a sweep runs half a minute later while Auto Scaling throttles the look where an instance is
    later = now + timedelta(seconds=30)
    with pytest.raises(SweepFailed):  # (its alarm)
        _repair(records, AutoscalingActions(looks_fail), FakeClock(later))(
            list(records.open_records("stack-a")), later, AMPLE
        )

    # Then its action was heartbeated all the same (invariant 11), and its lifecycle stays unconfirmed
    (action,) = ours.actions(transition=TERMINATING)
    assert (action.active, len(action.heartbeats)) == (True, 1)
    kept = records.get(record.id)
    assert kept is not None
    # (renewed as of Auto Scaling's answer: this sweep's clock is half a minute ahead of moto's)
    assert (kept.verified_at, kept.heartbeats) == (None, record.heartbeats + 1)
