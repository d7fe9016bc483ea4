"""The sweeper function on moto, for a stack without a cluster (an Elastic IP fleet): lost messages resumed,
actions near their global timeout completed, dangling addresses released."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders

from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle.domain.completion import ended_by
from nodecycle.domain.model import ENDS_ITS_INSTANCE, LifecycleRecord, Step, Transition, global_deadline
from nodecycle.domain.sweep.sweeper import SweepFailed
from tests.functions.intake.conftest import GROUP, HEARTBEAT_TIMEOUT
from tests.support.emf import metric
from tests.support.events import load_event
from tests.support.functions import AwsLatency, LambdaContext
from tests.support.stack import Stack, receive_all

OWNER = "stack-a"


def invocation() -> LambdaContext:
    return LambdaContext(remaining_millis=300_000)  # the sweeper's timeout (template.yaml)


def store(stack: Stack) -> DynamoRecordStore:
    return DynamoRecordStore(stack.table, ttl=timedelta(days=1))


def record(instance: str, step: Step, due_at: datetime, started_at: datetime) -> LifecycleRecord:
    token = str(uuid.uuid5(uuid.NAMESPACE_OID, instance))  # lifecycle action tokens are UUIDs
    return LifecycleRecord(
        id=f"{instance}/terminate/{token}",
        owner=OWNER,
        instance_id=instance,
        transition=Transition.TERMINATING,
        token=token,
        group=GROUP,
        hook="nodecycle-terminate",
        plan=(Step.RELEASE_EIP, Step.COMPLETE, Step.DONE),
        step=step,
        seq=3,
        received_at=started_at,
        started_at=started_at,
        updated_at=due_at,
        due_at=due_at,
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
        heartbeat_deadline=started_at + timedelta(seconds=HEARTBEAT_TIMEOUT),
        global_deadline=global_deadline(started_at, HEARTBEAT_TIMEOUT),
    )


def under_a_hook_of(record: LifecycleRecord, seconds: int) -> LifecycleRecord:
    """``record`` as one of a terminate hook of ``seconds`` (put on moto's group beside the 300 s one), its heartbeat
    deadline a timeout after its start: the sweeper times heartbeats by a hook's timeout as Auto Scaling tells it,
    when lower than its record's (a record of 3600 s under the group's 300 s hook is one whose hook was lowered)."""
    boto3.client("autoscaling").put_lifecycle_hook(
        AutoScalingGroupName=record.group,
        LifecycleHookName=f"nodecycle-terminate-{seconds}",
        LifecycleTransition="autoscaling:EC2_INSTANCE_TERMINATING",
        HeartbeatTimeout=seconds,
        DefaultResult="ABANDON",
    )
    return on_the_hook_of(record, seconds)


def on_the_hook_of(record: LifecycleRecord, seconds: int) -> LifecycleRecord:
    """``record`` as one of the terminate hook of ``seconds`` that ``under_a_hook_of`` put on the group already."""
    hook = f"nodecycle-terminate-{seconds}"
    return record.model_copy(
        update={
            "hook": hook,
            "heartbeat_timeout": seconds,
            "heartbeat_deadline": record.started_at + timedelta(seconds=seconds),
        }
    )


def kept_to_the_end(record: LifecycleRecord) -> LifecycleRecord:
    """``record`` as the heartbeats of the sweeps before leave an action stalled near its global timeout: its
    heartbeat deadline at the global timeout, and its action confirmed by the step that began (moto has none:
    "already settled" to the settlement's completion). (One whose record shows its heartbeat deadline past is
    asked about first, and moto has no action for it: an expiry. One no step confirmed is asked where its
    instance is first: moto's has none, an unknown action.)"""
    return record.model_copy(
        update={"heartbeat_deadline": record.global_deadline, "verified_at": record.started_at}
    )


def test_the_sweeper_resumes_lost_work_and_releases_dangling_addresses(
    sweeper: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a lifecycle whose message was lost 5 minutes ago, one that is waiting normally, and an address of
    # this stack left unassociated for an hour (plus one of another stack, and one just allocated)
    now = datetime.now(UTC)
    records = store(stack)
    lost = record(
        "i-0aaaaaaaaaaaaaaa1", Step.RELEASE_EIP, now - timedelta(minutes=5), now - timedelta(minutes=6)
    )
    # (its hook's heartbeat timeout is long: the action needs no heartbeat before the next sweep)
    lost = under_a_hook_of(lost, 3600)
    waiting = record("i-0aaaaaaaaaaaaaaa2", Step.RELEASE_EIP, now + timedelta(seconds=30), now)
    for item in (lost, waiting):
        assert records.create(item)
    ec2 = boto3.client("ec2")
    hour_ago = (now - timedelta(hours=1)).isoformat()

    def allocate(owner: str, at: str) -> str:
        tags: list[Any] = [
            {"Key": "nodecycle:owner", "Value": owner},
            {"Key": "nodecycle:allocated-at", "Value": at},
        ]
        allocated = ec2.allocate_address(
            Domain="vpc", TagSpecifications=[{"ResourceType": "elastic-ip", "Tags": tags}]
        )
        return str(allocated["AllocationId"])

    dangling = allocate(OWNER, hour_ago)
    theirs = allocate("stack-b", hour_ago)
    fresh = allocate(OWNER, now.isoformat())

    # When the scheduled sweep runs
    report = sweeper.handler(load_event("sweeper-schedule.json"), invocation())

    # Then the lost lifecycle is sent again (under a new seq), the waiting one is left alone, and only this
    # stack's old, unassociated address is released
    assert report["LifecyclesResumed"] == 1
    messages = [json.loads(m["Body"]) for m in receive_all(stack.eip_queue)]
    assert messages == [{"record_id": lost.id, "seq": 4, "step": "release-eip"}]
    left = {a["AllocationId"] for a in ec2.describe_addresses()["Addresses"]}
    assert dangling not in left
    assert {theirs, fresh} <= left
    output = capsys.readouterr().out
    assert metric(output, "LifecyclesResumed") == 1
    assert metric(output, "SweptEips") == 1


def test_an_action_near_its_global_timeout_is_completed_by_the_sweeper(
    sweeper: ModuleType, stack: Stack
) -> None:
    # Given a lifecycle stuck long enough that its action's global timeout is a minute away
    started = datetime.now(UTC) - timedelta(seconds=HEARTBEAT_TIMEOUT * 100 - 60)
    stuck = kept_to_the_end(
        record("i-0aaaaaaaaaaaaaaa3", Step.RELEASE_EIP, started + timedelta(minutes=1), started)
    )
    store(stack).create(stuck)

    # When the sweep runs
    report = sweeper.handler(load_event("sweeper-schedule.json"), invocation())

    # Then it completes the action itself (no active action in moto: "already settled" is success), with the
    # sweeper's outcome, and sends the release it interrupted on to the eip worker, after the completion
    assert report["LifecyclesSettled"] == 1
    swept = store(stack).get(stuck.id)
    assert swept is not None
    assert (swept.step, swept.outcome) == (Step.RELEASE_EIP, "settled-by-sweeper")
    assert swept.completed_at is not None
    messages = [json.loads(m["Body"]) for m in receive_all(stack.eip_queue)]
    assert messages == [{"record_id": stuck.id, "seq": swept.seq, "step": "release-eip"}]


def test_the_settlement_of_a_completion_cut_short_after_it_ended_its_instance_tells_its_cleanup_so(
    sweeper: ModuleType, stack: Stack
) -> None:
    # Given a drain's terminate lifecycle at its completion near its action's global timeout, whose completion
    # wrote its instance's state-change lifecycle over (EC2's state changes of the termination start nothing)
    # and was then cut short: the function killed, or Auto Scaling throttling the call. (This sweeper's stack
    # has no cluster: settling a lifecycle does not look at one.)
    started = datetime.now(UTC) - timedelta(seconds=HEARTBEAT_TIMEOUT * 100 - 60)
    cut_short = record("i-0aaaaaaaaaaaaaaa5", Step.COMPLETE, started + timedelta(minutes=1), started)
    cut_short = cut_short.model_copy(
        update={
            "plan": (Step.ACQUIRE_SLOT, Step.CORDON, Step.EVICT, Step.COMPLETE, Step.CLEANUP, Step.DONE),
            "node": "ip-10-0-1-23.eu-west-1.compute.internal",
            "verified_at": started,
        }
    )
    ended = ended_by(cut_short, started + timedelta(minutes=1))
    assert ended is not None
    for item in (cut_short, ended):
        assert store(stack).create(item)

    # When the sweep settles it
    report = sweeper.handler(load_event("sweeper-schedule.json"), invocation())

    # Then its cleanup is told that it ends its instance, and frees what the state change's lifecycle would
    # have (this owner's other budget entries of the instance, another lifecycle's annotations): nothing else
    # does at once
    assert report["LifecyclesSettled"] == 1
    swept = store(stack).get(cut_short.id)
    assert swept is not None
    assert (swept.step, swept.extra.get(ENDS_ITS_INSTANCE)) == (Step.CLEANUP, True)


def test_a_denied_listing_of_open_lifecycles_does_not_keep_dangling_addresses_from_being_released(
    sweeper: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an address of this stack left unassociated for an hour, and a sweeper whose DynamoDB Query of the
    # open lifecycles is denied (its role lost the index, say; a throttle past botocore's retries alike)
    ec2 = boto3.client("ec2")
    tags: list[Any] = [
        {"Key": "nodecycle:owner", "Value": OWNER},
        {"Key": "nodecycle:allocated-at", "Value": (datetime.now(UTC) - timedelta(hours=1)).isoformat()},
    ]
    dangling = ec2.allocate_address(
        Domain="vpc", TagSpecifications=[{"ResourceType": "elastic-ip", "Tags": tags}]
    )["AllocationId"]

    def deny(**_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        error = {"Code": "AccessDeniedException", "Message": "not authorized to perform dynamodb:Query"}
        answer: dict[str, Any] = {"Error": error, "ResponseMetadata": {}}
        return AWSResponse("https://dynamodb", 400, HTTPHeaders(), None), answer

    events = boto3._get_default_session().events  # the adapters' clients are made from it, on first use
    # (a before-call handler that answers is botocore's answer to the call: the stubs type it as answering None)
    events.register("before-call.dynamodb.Query", deny, unique_id="tests.DenyQuery")  # type: ignore[arg-type]
    try:
        # When the scheduled sweep runs
        with pytest.raises(SweepFailed):
            sweeper.handler(load_event("sweeper-schedule.json"), invocation())
    finally:
        events.unregister("before-call.dynamodb.Query", unique_id="tests.DenyQuery")

    # Then the parts that need no lifecycle record ran (the address is released), and the invocation failed
    # (the sweeper's errors alarm) naming the parts that could not run
    assert dangling not in {a["AllocationId"] for a in ec2.describe_addresses()["Addresses"]}
    assert metric(capsys.readouterr().out, "SweptEips") == 1


def test_a_sweep_invoked_with_too_little_time_left_starts_nothing_and_says_so(
    sweeper: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a lifecycle whose message was lost, and an invocation with 30 s left (less than the reserve
    # for one lifecycle's calls and the metrics flush)
    now = datetime.now(UTC)
    lost = record(
        "i-0aaaaaaaaaaaaaaa4", Step.RELEASE_EIP, now - timedelta(minutes=5), now - timedelta(minutes=6)
    )
    assert store(stack).create(lost)

    # When the scheduled sweep runs, Then it fails for want of time, having started nothing
    with pytest.raises(SweepFailed, match="want of time"):
        sweeper.handler(load_event("sweeper-schedule.json"), LambdaContext(remaining_millis=30_000))
    assert receive_all(stack.eip_queue) == []

    # and its metrics, flushed, tell of it
    assert metric(capsys.readouterr().out, "SweepsCutShort") == 1


def test_a_sweep_with_more_dangling_addresses_than_its_time_allows_stops_before_its_timeout_and_the_next_goes_on(
    sweeper: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given 150 addresses of this stack left unassociated for an hour (a refresh whose releases failed), each
    # two EC2 calls to release (described again, then released): at 1 s a call (EC2 throttling the account,
    # botocore retrying), more than the sweeper's 300 s
    ec2 = boto3.client("ec2")
    hour_ago = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    tags: list[Any] = [
        {"Key": "nodecycle:owner", "Value": OWNER},
        {"Key": "nodecycle:allocated-at", "Value": hour_ago},
    ]
    for _ in range(150):
        ec2.allocate_address(Domain="vpc", TagSpecifications=[{"ResourceType": "elastic-ip", "Tags": tags}])

    def left() -> int:
        return len(ec2.describe_addresses()["Addresses"])

    latency = AwsLatency(per_call=1.0)
    with latency.counting():
        # When the scheduled sweep runs, its time running out by the AWS calls it makes
        first = LambdaContext(remaining_millis=300_000, clock=latency)
        with pytest.raises(SweepFailed, match="want of time: addresses"):
            sweeper.handler(load_event("sweeper-schedule.json"), first)

        # Then it stopped before its timeout (Lambda would have ended it mid-call: no metrics, no log of what
        # was left undone), having released what its time allowed, and said so
        assert first.get_remaining_time_in_millis() > 0
        assert 0 < left() < 150
        assert metric(capsys.readouterr().out, "SweepsCutShort") == 1

        # and the next sweep goes on with the addresses still there, not the ones already released
        sweeper.handler(
            load_event("sweeper-schedule.json"), LambdaContext(remaining_millis=300_000, clock=latency)
        )
    assert left() == 0
