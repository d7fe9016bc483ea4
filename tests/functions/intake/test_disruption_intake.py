"""Intake of disruptions without a hook on moto: a Spot interruption, a rebalance recommendation, scheduled
maintenance and an instance gone outside the hooks become one lifecycle record per instance and cause when
the instance is of a managed group; what came by the queue is confirmed with EC2 first."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import boto3
import pytest
from moto.core import DEFAULT_ACCOUNT_ID
from moto.ec2.models import ec2_backends

from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle.adapters.clock import SystemClock
from nodecycle.domain.completion import ended_by
from nodecycle.domain.intake_budget import OutOfTime
from nodecycle.domain.model import SUCCESSOR, LifecycleRecord, Step, Transition
from nodecycle.domain.policy import MAINTENANCE_LOOK
from nodecycle.wiring import intake as intake_wiring
from nodecycle_sandbox.aws import ec2_instances
from nodecycle_sandbox.aws.install import install
from tests.functions.intake.conftest import GROUP, make_group
from tests.support.emf import metric
from tests.support.events import happening_now, load_event, sqs_event
from tests.support.functions import AwsLatency, LambdaContext
from tests.support.stack import Stack, receive_all


def records() -> list[dict[str, Any]]:
    """The lifecycle records (the table's other items: an event's intake progress, see IntakeBudget)."""
    items = boto3.resource("dynamodb").Table("nodecycle-lifecycle").scan()["Items"]
    return sorted((item for item in items if "step" in item), key=lambda item: str(item["id"]))


def work(queue_url: str) -> list[dict[str, Any]]:
    return [json.loads(message["Body"]) for message in receive_all(queue_url)]


def launch(group: str = GROUP) -> str:
    """One instance of ``group`` (moto tags it aws:autoscaling:groupName, as Auto Scaling does)."""
    autoscaling = boto3.client("autoscaling")
    before = set(instances_of(group))
    autoscaling.set_desired_capacity(AutoScalingGroupName=group, DesiredCapacity=len(before) + 1)
    (new,) = set(instances_of(group)) - before
    return new


def instances_of(group: str) -> list[str]:
    found = boto3.client("autoscaling").describe_auto_scaling_groups(AutoScalingGroupNames=[group])
    return [i["InstanceId"] for i in found["AutoScalingGroups"][0]["Instances"]]


def ec2_event(name: str, instance: str, **detail: str) -> dict[str, Any]:
    event = load_event(name)
    event["time"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    event["detail"] = {**event["detail"], "instance-id": instance, **detail}
    return event


def test_a_spot_interruption_of_a_managed_instance_starts_a_drain_at_once(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an instance of a managed group, and EC2's warning that it will be reclaimed (by EventBridge)
    instance = launch()
    event = ec2_event("eventbridge-spot-interruption.json", instance)

    # When intake receives it, twice (EventBridge delivers at least once)
    intake_fn.handler(event, LambdaContext())
    intake_fn.handler(event, LambdaContext())

    # Then one record per instance and cause, planned as a drain without a completion, and its first step
    (record,) = records()
    assert record["id"] == f"{instance}/spot-interruption"
    assert record["transition"] == Transition.SPOT_INTERRUPTION.value
    assert record["plan"] == ["acquire-slot", "cordon", "evict", "cleanup", "done"]
    assert record["group"] == GROUP
    assert work(stack.drain_queue) == [{"record_id": record["id"], "seq": 0, "step": "acquire-slot"}]
    assert metric(capsys.readouterr().out, "DisruptionsReceived", cause="spot-interruption") == 2


@pytest.fixture
def listing_waited_on_the_clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Intake's wait for EC2 to list an instance it does not (Intake._listed_late: looks again until LISTING_LAG
    after the event, 4 to 5 s of real sleep a test) moves intake's clock on instead of sleeping: the same looks,
    the same pauses between them, the same refusal once the lag is over. The pauses taken are listed."""
    paused: list[float] = []
    now = SystemClock.now

    def pause(seconds: float) -> None:
        paused.append(seconds)

    monkeypatch.setattr(intake_wiring, "pause", pause)
    monkeypatch.setattr(SystemClock, "now", lambda self: now(self) + timedelta(seconds=sum(paused)))
    return paused


def test_an_instance_of_a_group_this_stack_does_not_manage_is_left_to_others(
    intake_fn: ModuleType, stack: Stack
) -> None:
    make_group("nodes-other")
    instance = launch("nodes-other")
    intake_fn.handler(ec2_event("eventbridge-spot-interruption.json", instance), LambdaContext())
    assert records() == []


def test_an_instance_ec2_does_not_know_is_refused(
    listing_waited_on_the_clock: list[float],
    intake_fn: ModuleType,
    stack: Stack,
    capsys: pytest.CaptureFixture[str],
) -> None:
    intake_fn.handler(ec2_event("eventbridge-spot-interruption.json", "i-0ffffffffffffffff"), LambdaContext())
    assert records() == []
    assert metric(capsys.readouterr().out, "LifecycleEventsRejected", reason="unknown-instance") == 1
    assert listing_waited_on_the_clock  # (refused once EC2's listing lag was waited out)


def test_what_comes_by_the_queue_is_confirmed_with_ec2_first(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a running On-Demand instance of a managed group, and anyone who may send to the intake queue
    instance = launch()
    forged = [
        ec2_event("eventbridge-spot-interruption.json", instance),  # not a Spot instance at all
        ec2_event("eventbridge-instance-stopped.json", instance, state="terminated"),  # it is running
        ec2_event("eventbridge-rebalance-recommendation.json", instance),  # no API confirms one
    ]
    # When those arrive on the intake queue
    response = intake_fn.handler(sqs_event(*forged), LambdaContext())
    # Then none is recorded, and the batch did not fail for them (they are refused, not retried)
    assert response["batchItemFailures"] == []
    assert records() == []
    assert metric(capsys.readouterr().out, "LifecycleEventsRejected", reason="unconfirmed") == 3


def test_an_event_id_too_large_for_its_record_is_rejected_not_retried(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an instance of a managed group that is stopped (EC2 confirms it), and a state change telling of it
    # sent to the intake queue by someone allowed to send to it (a queue takes messages of up to 1 MiB), under
    # an id of 450,000 characters (EventBridge writes a UUID): more than the record's item can hold (400 KB)
    instance = launch()
    boto3.client("ec2").stop_instances(InstanceIds=[instance])
    event = {**ec2_event("eventbridge-instance-stopped.json", instance, state="stopped"), "id": "e" * 450_000}

    # When intake processes it
    response = intake_fn.handler(sqs_event(event), LambdaContext())

    # Then it is dropped with a reason that names the field, never retried into the dead-letter queue (the same
    # bytes can never be written)
    assert response == {"batchItemFailures": []}
    assert records() == []
    output = capsys.readouterr().out
    assert metric(output, "LifecycleEventsRejected", reason="invalid-field") == 1
    (error,) = [json.loads(line)["message"] for line in output.splitlines() if '"level":"ERROR"' in line]
    assert error.startswith("rejected a lifecycle event: id: ")
    assert len(error) < 1000  # what it got, cut short: not 450,000 characters in the log


def test_an_instance_terminated_outside_the_hooks_is_forgotten_at_once(
    intake_fn: ModuleType, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an instance of a managed group (with Elastic IPs on) terminated by someone outside the hooks
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "allocate")
    instance = launch()
    boto3.client("ec2").terminate_instances(InstanceIds=[instance])
    event = ec2_event("eventbridge-instance-stopped.json", instance, state="terminated")

    # When its state change arrives by the queue (EC2 confirms it: the instance is terminated)
    intake_fn.handler(sqs_event(event), LambdaContext())

    # Then its slot and annotations are freed (drain function), then its address taken back (eip function)
    (record,) = records()
    assert record["plan"] == [Step.FORGET_NODE.value, Step.RELEASE_EIP.value, Step.DONE.value]
    assert [m["step"] for m in work(stack.drain_queue)] == ["forget-node"]


def test_a_termination_told_after_ec2_has_forgotten_an_instance_no_record_names_is_acknowledged(
    listing_waited_on_the_clock: list[float],
    intake_fn: ModuleType,
    stack: Stack,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given EC2 as the sandbox emulates it, which lists a terminated instance for about an hour and then no more
    # (here: for a fifth of a second), and an instance of a managed group terminated outside the hooks, of which
    # no record of this stack tells (its launch went through its hook, nothing disrupted it since)
    install()
    ec2_instances.set_retention(ec2_backends[DEFAULT_ACCOUNT_ID]["eu-west-1"], 0.2)
    instance = launch()
    boto3.client("ec2").terminate_instances(InstanceIds=[instance])
    time.sleep(0.3)
    event = ec2_event("eventbridge-instance-stopped.json", instance, state="terminated")

    # When its state change arrives after that (a retried delivery, a dead-letter redrive)
    response = intake_fn.handler(sqs_event(event), LambdaContext())

    # Then it is acknowledged, as another's would be (nothing tells them apart), without a retry or a rejection:
    # the sweeper frees what the instance held (its budget entry, once EC2 no longer lists it alive; its address,
    # past the sweep grace). See test_state_changes_of_forgotten_instances.py.
    assert records() == []
    assert response == {"batchItemFailures": []}
    output = capsys.readouterr().out
    assert metric(output, "LifecycleEventsRejected", reason="unknown-instance") == 0
    assert metric(output, "LifecycleActionsIgnored") == 1


def worked(record: dict[str, Any], stack: Stack) -> None:
    """The record's lifecycle as its steps leave it: done, its work taken."""
    boto3.resource("dynamodb").Table("nodecycle-lifecycle").update_item(
        Key={"id": record["id"]},
        UpdateExpression="SET step = :done",
        ExpressionAttributeValues={":done": "done"},
    )
    boto3.client("sqs").purge_queue(QueueUrl=stack.drain_queue)


def stopped_once_and_started_again(intake_fn: ModuleType, stack: Stack) -> tuple[str, dict[str, Any]]:
    """An instance of a managed group stopped outside the hooks, its lifecycle of that stop over, then started
    again: the instance, and its record as that lifecycle left it."""
    instance = launch()
    ec2 = boto3.client("ec2")
    ec2.stop_instances(InstanceIds=[instance])
    intake_fn.handler(
        ec2_event("eventbridge-instance-stopped.json", instance, state="stopped"), LambdaContext()
    )
    (told,) = records()
    worked(told, stack)
    ec2.start_instances(InstanceIds=[instance])
    return instance, told


def test_an_instance_stopped_once_and_terminated_later_is_forgotten_again_at_once(
    intake_fn: ModuleType, stack: Stack
) -> None:
    # Given an instance of a managed group that was stopped outside the hooks (its lifecycle, long over),
    # then started again
    instance, first = stopped_once_and_started_again(intake_fn, stack)
    ec2 = boto3.client("ec2")

    # When it is terminated outside the hooks (a new event, of its own id)
    ec2.terminate_instances(InstanceIds=[instance])
    terminated = ec2_event("eventbridge-instance-stopped.json", instance, state="terminated")
    terminated["id"] = "5d0c7e0a-95b3-4c4c-9d0e-6a2f1b8e7c31"
    intake_fn.handler(terminated, LambdaContext())

    # Then its lifecycle starts over under the new event (not dropped as a duplicate of the first), and its
    # slot and annotations are freed at once
    (again,) = records()
    assert (again["token"], again["step"], int(again["seq"])) == (
        terminated["id"],
        "forget-node",
        int(first["seq"]) + 1,
    )
    assert [(m["step"], m["seq"]) for m in work(stack.drain_queue)] == [("forget-node", int(again["seq"]))]
    # while the same event delivered again is still a duplicate
    intake_fn.handler(terminated, LambdaContext())
    assert len(work(stack.drain_queue)) == 1


@pytest.mark.parametrize(("first", "then"), [("shutting-down", "terminated"), ("stopping", "stopped")])
def test_the_two_state_changes_ec2_tells_of_one_stop_or_termination_start_one_lifecycle(
    intake_fn: ModuleType, stack: Stack, first: str, then: str
) -> None:
    # Given an instance of a managed group stopped or terminated outside the hooks, whose first state change
    # (stopping, shutting-down) started a lifecycle that is over
    instance = launch()
    ec2 = boto3.client("ec2")
    if then == "terminated":
        ec2.terminate_instances(InstanceIds=[instance])
    else:
        ec2.stop_instances(InstanceIds=[instance])
    intake_fn.handler(ec2_event("eventbridge-instance-stopped.json", instance, state=first), LambdaContext())
    (told,) = records()
    worked(told, stack)

    # When EC2's second state change of it comes (stopped, terminated: a new event of its own id), EC2's
    # requests counted
    second = ec2_event("eventbridge-instance-stopped.json", instance, state=then)
    second["id"] = "5d0c7e0a-95b3-4c4c-9d0e-6a2f1b8e7c31"
    latency = AwsLatency(per_call=0.01)
    with latency.counting():
        intake_fn.handler(second, LambdaContext(clock=latency))

    # Then it is the same stop or termination: nothing starts again (a second lifecycle freed nothing more), and
    # EC2 is not asked about an instance the record tells of already
    (after,) = records()
    assert (after["token"], after["step"], int(after["seq"])) == (told["token"], "done", int(told["seq"]))
    assert work(stack.drain_queue) == []
    assert latency.operations["DescribeInstances"] == 0


@pytest.mark.parametrize(("first", "then"), [("shutting-down", "terminated"), ("stopping", "stopped")])
def test_the_two_state_changes_of_one_stop_or_termination_delivered_out_of_order_start_one_lifecycle(
    intake_fn: ModuleType, stack: Stack, first: str, then: str
) -> None:
    # Given an instance of a managed group stopped or terminated outside the hooks, whose second state change
    # (stopped, terminated) EventBridge delivered first (it keeps no order; a failed delivery of the first is
    # retried minutes later), and the lifecycle it started is over
    instance = launch()
    ec2 = boto3.client("ec2")
    if then == "terminated":
        ec2.terminate_instances(InstanceIds=[instance])
    else:
        ec2.stop_instances(InstanceIds=[instance])
    told_at = datetime.now(UTC).replace(microsecond=0)
    second = ec2_event("eventbridge-instance-stopped.json", instance, state=then)
    second["time"] = told_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    intake_fn.handler(second, LambdaContext())
    (told,) = records()
    worked(told, stack)

    # When the first state change of it comes at last (its own id, its earlier time)
    late = ec2_event("eventbridge-instance-stopped.json", instance, state=first)
    late["id"] = "5d0c7e0a-95b3-4c4c-9d0e-6a2f1b8e7c31"
    late["time"] = (told_at - timedelta(seconds=20)).strftime("%Y-%m-%dT%H:%M:%SZ")
    intake_fn.handler(late, LambdaContext())

    # Then it is the same stop or termination: nothing starts again
    (after,) = records()
    assert (after["token"], after["step"], int(after["seq"])) == (told["token"], "done", int(told["seq"]))
    assert work(stack.drain_queue) == []


def test_a_stop_of_an_instance_started_again_since_its_last_stop_starts_its_lifecycle_again(
    intake_fn: ModuleType, stack: Stack
) -> None:
    # Given an instance stopped outside the hooks (its lifecycle over), then started again
    instance, _ = stopped_once_and_started_again(intake_fn, stack)
    ec2 = boto3.client("ec2")

    # When it is stopped again (a new event, of its own id)
    ec2.stop_instances(InstanceIds=[instance])
    again = ec2_event("eventbridge-instance-stopped.json", instance, state="stopping")
    again["id"] = "5d0c7e0a-95b3-4c4c-9d0e-6a2f1b8e7c31"
    intake_fn.handler(again, LambdaContext())

    # Then it is another stop: its lifecycle starts over, and frees what the instance held since it ran again
    (after,) = records()
    assert (after["token"], after["step"]) == (again["id"], "forget-node")
    assert [m["step"] for m in work(stack.drain_queue)] == ["forget-node"]


def test_a_stop_told_by_the_queue_with_a_time_still_to_come_does_not_hide_the_next_stop(
    intake_fn: ModuleType, stack: Stack
) -> None:
    # Given a stopped instance of a managed group, whose state change came by the intake queue dated centuries
    # ahead (anyone allowed to send to it sets the time; EC2 confirms only the state), its lifecycle over, and
    # the instance started again
    instance = launch()
    ec2 = boto3.client("ec2")
    ec2.stop_instances(InstanceIds=[instance])
    forged = ec2_event("eventbridge-instance-stopped.json", instance, state="stopped")
    forged["time"] = "2999-01-01T00:00:00Z"
    intake_fn.handler(sqs_event(forged), LambdaContext())
    (told,) = records()
    worked(told, stack)
    ec2.start_instances(InstanceIds=[instance])

    # When it is stopped again (AWS's own event, of its own id and time)
    ec2.stop_instances(InstanceIds=[instance])
    again = ec2_event("eventbridge-instance-stopped.json", instance, state="stopping")
    again["id"] = "5d0c7e0a-95b3-4c4c-9d0e-6a2f1b8e7c31"
    intake_fn.handler(again, LambdaContext())

    # Then it is another stop: the forged time does not make it look older than the one told before
    (after,) = records()
    assert (after["token"], after["step"]) == (again["id"], "forget-node")
    assert [m["step"] for m in work(stack.drain_queue)] == ["forget-node"]


def test_the_state_changes_of_a_termination_through_its_hook_start_nothing_and_ask_ec2_nothing(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an instance whose terminate lifecycle completed its action, which wrote the instance's state-change
    # lifecycle over (its own cleanup frees what that one would)
    instance = launch()
    now = datetime.now(UTC)
    terminate = LifecycleRecord(
        id=f"{instance}/terminate/token",
        owner="stack-a",
        instance_id=instance,
        transition=Transition.TERMINATING,
        token="token",
        group=GROUP,
        hook="drain",
        plan=(Step.ACQUIRE_SLOT, Step.CORDON, Step.EVICT, Step.COMPLETE, Step.CLEANUP, Step.DONE),
        step=Step.COMPLETE,
        node="ip-10-0-1-23.eu-west-1.compute.internal",
        received_at=now,
        started_at=now,
        updated_at=now,
        due_at=now,
        heartbeat_timeout=300,
        heartbeat_deadline=now + timedelta(seconds=300),
        global_deadline=now + timedelta(hours=1),
        verified_at=now,
    )
    ended = ended_by(terminate, now)
    assert ended is not None
    assert DynamoRecordStore("nodecycle-lifecycle", ttl=timedelta(days=1)).create(ended)
    boto3.client("ec2").terminate_instances(InstanceIds=[instance])

    # When EC2's two state changes of the termination come
    latency = AwsLatency(per_call=0.01)
    with latency.counting():
        for state, event_id in (("shutting-down", "e-1"), ("terminated", "e-2")):
            event = ec2_event("eventbridge-instance-stopped.json", instance, state=state)
            intake_fn.handler({**event, "id": event_id}, LambdaContext(clock=latency))

    # Then they start nothing, at one read each
    (after,) = records()
    assert (after["id"], after["step"], int(after["seq"])) == (ended.id, "done", 0)
    assert work(stack.drain_queue) == []
    assert dict(latency.operations) == {"GetItem": 2}
    assert metric(capsys.readouterr().out, "LifecycleEventsDuplicate") == 2


def test_a_state_change_that_comes_after_the_instance_is_running_again_changes_nothing(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an instance of a managed group that was stopped and is running again (out of a warm pool, say),
    # and EventBridge's "stopped" event for it, delivered late (Lambda retries an event for hours)
    instance = launch()
    late = ec2_event("eventbridge-instance-stopped.json", instance, state="stopped")

    # When intake receives it
    intake_fn.handler(late, LambdaContext())

    # Then nothing is freed or released for an instance that runs: EC2's state now decides, not the event's
    assert records() == []
    assert metric(capsys.readouterr().out, "LifecycleEventsRejected", reason="stale") == 1


@pytest.mark.parametrize(("policy", "plan"), [("ignore", None), ("cordon", ["cordon", "cleanup", "done"])])
def test_a_rebalance_recommendation_does_what_the_stack_says(
    intake_fn: ModuleType, stack: Stack, monkeypatch: pytest.MonkeyPatch, policy: str, plan: list[str] | None
) -> None:
    monkeypatch.setenv("NODECYCLE_REBALANCE_POLICY", policy)
    instance = launch()
    intake_fn.handler(ec2_event("eventbridge-rebalance-recommendation.json", instance), LambdaContext())
    assert [r["plan"] for r in records()] == ([] if plan is None else [plan])


@pytest.mark.parametrize(
    "name", ["eventbridge-rebalance-recommendation.json", "eventbridge-spot-interruption.json"]
)
def test_a_disruption_an_archive_replays_is_refused(
    intake_fn: ModuleType,
    stack: Stack,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    name: str,
) -> None:
    # Given a stack that drains on rebalance recommendations, and a running instance of a managed group
    monkeypatch.setenv("NODECYCLE_REBALANCE_POLICY", "drain")
    instance = launch()
    # When an operator replays the default bus's archive: an event of last month comes again, by EventBridge,
    # marked with its replay's name
    event = ec2_event(name, instance)
    event["time"] = (datetime.now(UTC) - timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    event["replay-name"] = "operator-replay-of-last-month"
    intake_fn.handler(event, LambdaContext())
    # Then nothing is cordoned or drained for it (invariant 8), and the refusal says why
    assert records() == []
    assert metric(capsys.readouterr().out, "LifecycleEventsRejected", reason="replayed") == 1


def test_a_replay_name_no_eventbridge_replay_has_is_refused_and_its_lines_stay_within_a_log_event(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a Spot warning of a running instance of a managed group sent to the intake queue (anyone allowed to send
    # to it writes what it likes, up to 1 MiB) marked with a replay's name of 300,000 characters (EventBridge names
    # a replay in at most 64)
    instance = launch()
    event = ec2_event("eventbridge-spot-interruption.json", instance)
    event["replay-name"] = "r" * 300_000

    # When intake takes the record in
    assert intake_fn.handler(sqs_event(event), LambdaContext()) == {"batchItemFailures": []}

    # Then it is refused naming the field, nothing drained, and no line it logs is cut by CloudWatch Logs (which
    # keeps 256 KB of an event: a longer line loses its end, its JSON with it)
    assert records() == []
    output = capsys.readouterr().out
    assert metric(output, "LifecycleEventsRejected", reason="invalid-field") == 1
    assert max(len(line.encode()) for line in output.splitlines()) < 16_000


def test_a_rebalance_recommendation_older_than_any_delivery_is_refused(
    intake_fn: ModuleType, stack: Stack, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a stack that drains on rebalance recommendations, and a recommendation for a running instance
    # sent seven hours ago (Lambda keeps an event at most six hours: none is delivered that late)
    monkeypatch.setenv("NODECYCLE_REBALANCE_POLICY", "drain")
    instance = launch()
    old = ec2_event("eventbridge-rebalance-recommendation.json", instance)
    old["time"] = (datetime.now(UTC) - timedelta(hours=7)).strftime("%Y-%m-%dT%H:%M:%SZ")
    # When it reaches intake by EventBridge
    intake_fn.handler(old, LambdaContext())
    # Then no drain starts for it
    assert records() == []
    assert metric(capsys.readouterr().out, "LifecycleEventsRejected", reason="stale") == 1


def schedule(
    instance: str,
    starts: datetime,
    code: str = "instance-retirement",
    description: str = "The instance is running on degraded hardware",
) -> None:
    """EC2's side of scheduled maintenance: the event DescribeInstanceStatus lists for the instance (moto
    answers the events its instance model carries, as the sandbox's emulation sets them)."""
    model: Any = ec2_backends[DEFAULT_ACCOUNT_ID]["eu-west-1"].get_instance(instance)
    model.events = [
        *(getattr(model, "events", None) or []),
        {
            "InstanceEventId": f"instance-event-{len(getattr(model, 'events', None) or [])}",
            "Code": code,
            "Description": description,
            "NotBefore": starts,
            "NotAfter": starts + timedelta(hours=2),
        },
    ]


def delayed(queue_url: str) -> int:
    attributes = boto3.client("sqs").get_queue_attributes(
        QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessagesDelayed"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessagesDelayed"])


def health_event(
    instance: str,
    starts: datetime,
    event_id: str | None = None,
    type_code: str = "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
) -> dict[str, Any]:
    event = load_event("eventbridge-health-scheduled-retirement.json")
    event["detail"]["startTime"] = starts.strftime("%a, %d %b %Y %H:%M:%S GMT")
    event["detail"]["eventTypeCode"] = type_code
    event["detail"]["affectedEntities"] = [{"entityValue": instance}]
    if event_id is not None:
        event["id"] = event_id
    return event


LEAD = timedelta(hours=1)  # the maintenance lead the tests below set
SYSTEM_REBOOT = "AWS_EC2_SYSTEM_REBOOT_MAINTENANCE_SCHEDULED"  # AWS Health's type of a system-reboot


@pytest.fixture
def an_hours_lead(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODECYCLE_MAINTENANCE_LEAD_MINUTES", "60")


def due_a_lead_before(record: dict[str, Any], starts: datetime) -> bool:
    """Whether the record's next step is due the lead before ``starts`` (to the seconds the handler took), or at its
    first look at EC2's listing before then (MAINTENANCE_LOOK after it was taken in), whichever comes first."""
    taken = datetime.fromisoformat(record["received_at"])
    due = min(starts - LEAD, taken + MAINTENANCE_LOOK)
    return abs(datetime.fromisoformat(record["due_at"]) - due) < timedelta(seconds=5)


@pytest.mark.usefixtures("an_hours_lead")
def test_scheduled_maintenance_is_drained_a_lead_time_before_it_starts(
    intake_fn: ModuleType, stack: Stack
) -> None:
    # Given an instance whose retirement AWS Health scheduled for three hours from now, and a one-hour lead
    instance = launch()
    starts = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=3)
    schedule(instance, starts)

    # When intake receives it
    intake_fn.handler(health_event(instance, starts), LambdaContext())

    # Then its drain is due two hours from now (its first message comes back until then)
    (record,) = records()
    assert record["transition"] == Transition.SCHEDULED_CHANGE.value
    assert due_a_lead_before(record, starts)


@pytest.mark.usefixtures("an_hours_lead")
def test_maintenance_is_timed_by_ec2_not_by_the_message(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an instance EC2 has maintenance scheduled for in three days, and one EC2 has none for
    scheduled, unscheduled = launch(), launch()
    starts = datetime.now(UTC).replace(microsecond=0) + timedelta(days=3)
    schedule(scheduled, starts)

    # When Health events for both arrive by the queue, saying the maintenance starts now (forged or stale)
    now = datetime.now(UTC)
    response = intake_fn.handler(
        sqs_event(health_event(scheduled, now), health_event(unscheduled, now, "another-event")),
        LambdaContext(),
    )

    # Then the drain is due by EC2's start, not at once; the other is refused; the batch did not fail
    assert response["batchItemFailures"] == []
    (record,) = records()
    assert record["instance_id"] == scheduled
    assert due_a_lead_before(record, starts)
    assert datetime.fromisoformat(record["global_deadline"]) == starts
    assert metric(capsys.readouterr().out, "LifecycleEventsRejected", reason="unconfirmed") == 1


@pytest.mark.usefixtures("an_hours_lead")
def test_maintenance_moved_earlier_moves_its_waiting_drain(intake_fn: ModuleType, stack: Stack) -> None:
    # Given a drain waiting for maintenance three hours from now, which EC2 then moves to two hours
    instance = launch()
    first = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=3)
    schedule(instance, first)
    intake_fn.handler(health_event(instance, first), LambdaContext())
    (waiting,) = records()
    assert delayed(stack.drain_queue) == 1  # its first step, back when a delay can reach (15 minutes)
    earlier = first - timedelta(hours=1)
    schedule(instance, earlier)

    # When AWS Health tells of it (a new event), twice
    moved = health_event(instance, earlier, "7e1f0c2a-3b4d-4e5f-8a9b-0c1d2e3f4a5b")
    intake_fn.handler(moved, LambdaContext())
    intake_fn.handler(moved, LambdaContext())

    # Then the same lifecycle follows the new start, on a new seq: the drain is due an hour earlier
    (record,) = records()
    assert (record["id"], int(record["seq"]), record["token"]) == (waiting["id"], 1, moved["id"])
    assert datetime.fromisoformat(record["global_deadline"]) == earlier
    assert due_a_lead_before(record, earlier)
    # the first step again, for seq 1 (the old message will be stale), and the second delivery's watch of seq 1
    # (a retry of the event that moved it: its message may have been refused, test_refused_sends_after_a_move.py)
    assert delayed(stack.drain_queue) == 3


def finish(record: dict[str, Any]) -> None:
    """The record's lifecycle over, as its last step leaves it."""
    boto3.resource("dynamodb").Table("nodecycle-lifecycle").update_item(
        Key={"id": record["id"]},
        UpdateExpression="SET #s = :done, finished_at = :now REMOVE open_owner, due_epoch",
        ExpressionAttributeNames={"#s": "step"},
        ExpressionAttributeValues={":done": "done", ":now": datetime.now(UTC).isoformat()},
    )


def a_reboot_then_a_retirement(intake_fn: ModuleType) -> tuple[str, datetime, datetime]:
    """An instance EC2 will reboot in 50 minutes and retire in 10 days (it lists both), and the reboot's
    Health event told: the instance and the two starts."""
    instance = launch()
    now = datetime.now(UTC).replace(microsecond=0)
    reboot, retirement = now + timedelta(minutes=50), now + timedelta(days=10)
    schedule(instance, reboot, code="system-reboot", description="scheduled reboot")
    schedule(instance, retirement)
    intake_fn.handler(health_event(instance, reboot), LambdaContext())
    return instance, reboot, retirement


@pytest.mark.usefixtures("an_hours_lead")
def test_a_second_maintenance_of_an_instance_is_timed_by_its_own_start_and_drained_again(
    intake_fn: ModuleType, stack: Stack
) -> None:
    # Given an instance EC2 will reboot in 50 minutes and retire in 10 days, and the reboot's Health event,
    # whose drain is over
    instance, reboot, retirement = a_reboot_then_a_retirement(intake_fn)
    (first,) = records()
    assert datetime.fromisoformat(first["global_deadline"]) == reboot
    finish(first)

    # When the retirement's Health event (another event, another start) arrives while EC2 still lists both
    intake_fn.handler(
        health_event(instance, retirement, "5d3c2b1a-0f9e-4d8c-9b7a-6f5e4d3c2b1a"), LambdaContext()
    )

    # Then the retirement has a lifecycle of its own, timed by its own start (not the reboot's: a duplicate)
    (second,) = records()
    assert (int(second["seq"]), second["step"]) == (int(first["seq"]) + 1, "acquire-slot")
    assert datetime.fromisoformat(second["global_deadline"]) == retirement
    assert due_a_lead_before(second, retirement)


@pytest.mark.usefixtures("an_hours_lead")
def test_a_health_update_of_a_maintenance_drained_for_before_the_next_one_is_a_duplicate(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an instance EC2 will reboot in 50 minutes and retire in 10 days, the reboot's drain over, and the
    # retirement's lifecycle started over on the record after it
    instance, reboot, retirement = a_reboot_then_a_retirement(intake_fn)
    finish(records()[0])
    intake_fn.handler(
        health_event(instance, retirement, "5d3c2b1a-0f9e-4d8c-9b7a-6f5e4d3c2b1a"), LambdaContext()
    )
    (waiting,) = records()

    # When AWS Health updates the reboot's event (a new id, the same start) while EC2 lists both, and again once
    # the retirement's lifecycle is over too
    update = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"
    intake_fn.handler(health_event(instance, reboot, update), LambdaContext())
    (after_update,) = records()
    finish(after_update)
    intake_fn.handler(health_event(instance, reboot, "0b1c2d3e-4f5a-4b6c-9d8e-7f6a5b4c3d2e"), LambdaContext())

    # Then neither is drained for again: the retirement's lifecycle was left as it was, and the record stays over
    assert (after_update["seq"], after_update["token"]) == (waiting["seq"], waiting["token"])
    assert datetime.fromisoformat(after_update["global_deadline"]) == retirement
    (record,) = records()
    assert (record["step"], record["token"]) == ("done", waiting["token"])
    assert metric(capsys.readouterr().out, "LifecycleEventsDuplicate") == 2


@pytest.mark.usefixtures("an_hours_lead")
def test_the_next_maintenance_told_while_the_drained_one_is_watched_for_its_end_follows_it(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an instance drained for a reboot, which EC2 has carried out since (it lists it completed), the
    # reboot's lifecycle at its cleanup, watching for the reboot's end before it lifts the cordon
    instance = launch()
    now = datetime.now(UTC).replace(microsecond=0)
    reboot = now + timedelta(minutes=50)
    schedule(instance, reboot, code="system-reboot", description="scheduled reboot")
    intake_fn.handler(health_event(instance, reboot), LambdaContext())
    (record,) = records()
    boto3.resource("dynamodb").Table("nodecycle-lifecycle").update_item(
        Key={"id": record["id"]},
        UpdateExpression="SET #s = :cleanup, drain_started_at = :now",
        ExpressionAttributeNames={"#s": "step"},
        ExpressionAttributeValues={":cleanup": "cleanup", ":now": now.isoformat()},
    )
    model: Any = ec2_backends[DEFAULT_ACCOUNT_ID]["eu-west-1"].get_instance(instance)
    model.events = [{**e, "Description": f"[Completed] {e['Description']}"} for e in model.events]

    # When AWS Health tells of the instance's retirement in ten days (EC2 lists it, and no longer the reboot)
    retirement = now + timedelta(days=10)
    schedule(instance, retirement)
    intake_fn.handler(
        health_event(instance, retirement, "5d3c2b1a-0f9e-4d8c-9b7a-6f5e4d3c2b1a"), LambdaContext()
    )

    # Then it is no duplicate of the reboot: its lifecycle follows the reboot's on the record, due a lead before
    # its own start
    assert metric(capsys.readouterr().out, "LifecycleEventsDuplicate") in (None, 0)
    (watching,) = records()
    assert watching["step"] == "cleanup"
    successor = LifecycleRecord.model_validate(watching["extra"][SUCCESSOR])
    assert (successor.step, successor.global_deadline) == (Step.ACQUIRE_SLOT, retirement)


@pytest.mark.usefixtures("an_hours_lead")
@pytest.mark.parametrize("told_first", ["reboot", "retirement"])
def test_two_maintenances_told_while_the_first_waits_are_each_drained_for_in_turn(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str], told_first: str
) -> None:
    # Given an instance EC2 will reboot in 3 days and retire in 10 days, both listed now
    instance = launch()
    now = datetime.now(UTC).replace(microsecond=0)
    starts = {"reboot": now + timedelta(days=3), "retirement": now + timedelta(days=10)}
    schedule(instance, starts["reboot"], code="system-reboot", description="scheduled reboot")
    schedule(instance, starts["retirement"])

    # When AWS Health tells of each (an event each, never again), in either order, while the first waits
    told_second = "retirement" if told_first == "reboot" else "reboot"
    intake_fn.handler(health_event(instance, starts[told_first]), LambdaContext())
    intake_fn.handler(
        health_event(instance, starts[told_second], "5d3c2b1a-0f9e-4d8c-9b7a-6f5e4d3c2b1a"), LambdaContext()
    )

    # Then neither is a duplicate: the lifecycle waits for the reboot, and the retirement's follows it on the
    # record, due a lead before its own start
    assert metric(capsys.readouterr().out, "LifecycleEventsDuplicate") in (None, 0)
    (record,) = records()
    assert datetime.fromisoformat(record["global_deadline"]) == starts["reboot"]
    successor = LifecycleRecord.model_validate(record["extra"][SUCCESSOR])
    assert (successor.step, successor.global_deadline) == (Step.ACQUIRE_SLOT, starts["retirement"])
    assert successor.due_at == min(
        starts["retirement"] - timedelta(hours=1), successor.received_at + MAINTENANCE_LOOK
    )
    assert SUCCESSOR not in successor.extra

    # and Health telling of the retirement again (an update) queues nothing more
    intake_fn.handler(
        health_event(instance, starts["retirement"], "6e4d3c2b-1a0f-4e9d-8c7b-6a5f4e3d2c1b"), LambdaContext()
    )
    assert metric(capsys.readouterr().out, "LifecycleEventsDuplicate") == 1


@pytest.mark.usefixtures("an_hours_lead")
def test_a_retirement_ec2_lists_late_is_not_timed_by_the_instances_reboot_days_before_it(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an instance EC2 will reboot in 3 days (it lists the reboot), whose Health event was taken in
    instance = launch()
    now = datetime.now(UTC).replace(microsecond=0)
    reboot, retirement = now + timedelta(days=3), now + timedelta(days=10)
    schedule(instance, reboot, code="system-reboot", description="scheduled reboot")
    intake_fn.handler(health_event(instance, reboot, type_code=SYSTEM_REBOOT), LambdaContext())

    # When AWS Health tells of the instance's retirement in 10 days, which EC2 does not list yet (its listing lags)
    intake_fn.handler(
        health_event(instance, retirement, "5d3c2b1a-0f9e-4d8c-9b7a-6f5e4d3c2b1a"), LambdaContext()
    )

    # Then the retirement is no duplicate of the reboot: its lifecycle follows the reboot's on the record, timed by
    # its own start
    assert metric(capsys.readouterr().out, "LifecycleEventsDuplicate") in (None, 0)
    (record,) = records()
    assert datetime.fromisoformat(record["global_deadline"]) == reboot
    successor = LifecycleRecord.model_validate(record["extra"][SUCCESSOR])
    assert (successor.step, successor.global_deadline) == (Step.ACQUIRE_SLOT, retirement)


def test_a_spot_instance_restarted_after_an_interruption_is_drained_again_at_the_next(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an instance of a managed group (a Spot instance whose interruption behaviour is stop), and the
    # drain of its first interruption, over
    instance = launch()
    first = ec2_event("eventbridge-spot-interruption.json", instance, **{"instance-action": "stop"})
    intake_fn.handler(first, LambdaContext())
    (drained,) = records()
    finish(drained)
    boto3.client("sqs").purge_queue(QueueUrl=stack.drain_queue)

    # When a second warning of that same interruption comes (another id, sent before it struck)
    again = {**first, "id": "3a2b1c0d-1111-4222-8333-944455556666"}
    intake_fn.handler(again, LambdaContext())
    # Then it is a duplicate: the node is not drained twice for one interruption
    assert work(stack.drain_queue) == []

    # When, days later (EC2 started the instance again), EC2 warns of another interruption, twice
    days = timedelta(days=3)
    boto3.resource("dynamodb").Table("nodecycle-lifecycle").update_item(
        Key={"id": drained["id"]},
        UpdateExpression="SET started_at = :s, heartbeat_deadline = :d, global_deadline = :d",
        ExpressionAttributeValues={
            ":s": (datetime.fromisoformat(drained["started_at"]) - days).isoformat(),
            ":d": (datetime.fromisoformat(drained["global_deadline"]) - days).isoformat(),
        },
    )
    second = ec2_event("eventbridge-spot-interruption.json", instance, **{"instance-action": "stop"})
    second["id"] = "0b9f5f7e-1111-4222-8333-944455556666"
    intake_fn.handler(second, LambdaContext())
    intake_fn.handler(second, LambdaContext())

    # Then the node is drained again, once, under the new event (not swallowed for the record's lifetime)
    (record,) = records()
    assert (record["token"], int(record["seq"])) == (second["id"], int(drained["seq"]) + 1)
    assert [(m["step"], m["seq"]) for m in work(stack.drain_queue)] == [("acquire-slot", int(record["seq"]))]


def test_a_spot_warning_delivered_after_its_two_minutes_is_confirmed_with_ec2(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a running instance EC2 has not marked for interruption, and a Spot warning for it sent ten
    # minutes ago by EventBridge (Lambda retries an event for hours; the instance ran on)
    instance = launch()
    late = ec2_event("eventbridge-spot-interruption.json", instance)
    late["time"] = (datetime.now(UTC) - timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ")

    # When intake receives it
    intake_fn.handler(late, LambdaContext())

    # Then no drain takes a slot (forced past the budget) for an instance that runs on
    assert records() == []
    assert metric(capsys.readouterr().out, "LifecycleEventsRejected", reason="stale") == 1


@pytest.mark.usefixtures("an_hours_lead")
def test_maintenance_by_eventbridge_that_ec2_does_not_list_yet_is_drained_by_the_events_start(
    intake_fn: ModuleType, stack: Stack
) -> None:
    # Given AWS Health's event of a retirement in three hours, which EC2's status does not list (yet)
    instance = launch()
    starts = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=3)

    # When it comes by EventBridge (only AWS can put it there)
    intake_fn.handler(health_event(instance, starts), LambdaContext())

    # Then it is drained ahead of the event's start rather than not at all
    (record,) = records()
    assert datetime.fromisoformat(record["global_deadline"]) == starts


@pytest.mark.usefixtures("an_hours_lead")
def test_maintenance_ec2_lists_as_canceled_or_completed_does_not_time_the_drain(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an instance whose earlier maintenance EC2 lists as canceled, and one as completed
    instance = launch()
    now = datetime.now(UTC).replace(microsecond=0)
    schedule(
        instance,
        now + timedelta(hours=1),
        description="[Canceled] The instance is running on degraded hardware",
    )
    schedule(
        instance,
        now - timedelta(days=1),
        description="[Completed] The instance is running on degraded hardware",
    )

    # When a Health event of it comes by the queue
    intake_fn.handler(sqs_event(health_event(instance, now + timedelta(hours=1))), LambdaContext())

    # Then EC2 confirms nothing: refused
    assert records() == []
    assert metric(capsys.readouterr().out, "LifecycleEventsRejected", reason="unconfirmed") == 1


def test_maintenance_by_eventbridge_that_is_over_drains_nothing(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given AWS Health's event of a maintenance that started an hour ago (Health tells of it again when it is
    # over), which EC2 lists as completed
    instance = launch()
    started = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    schedule(instance, started, description="[Completed] The instance is running on degraded hardware")

    # When it comes by EventBridge
    intake_fn.handler(health_event(instance, started), LambdaContext())

    # Then no drain starts for a maintenance that is over
    assert records() == []
    assert metric(capsys.readouterr().out, "LifecycleEventsRejected", reason="stale") == 1


HOOK_INSTANCE = "i-0a1b2c3d4e5f60718"  # the instance of the sample hook notifications
INTAKE_TIMEOUT_MILLIS = 30_000  # the intake function's Timeout in template.yaml
AWS_CALL = 0.1  # seconds an EC2, DynamoDB or SQS call takes in AWS, give or take (moto answers in ~1 ms)
# An event too long for one invocation: 80 instances at three AWS calls each, a call as slow as AWS's under load
# (0.15 s): 36 s, more than the function's 30 s timeout. (120 instances at 0.1 s a call made the same 36 s, with
# half as many instances again for moto to launch and intake to take in.)
MANY = 80
SLOW_AWS_CALL = 0.15


def many_scheduled(count: int, starts: datetime) -> list[str]:
    """``count`` instances of the managed group, each with maintenance EC2 schedules at ``starts``."""
    autoscaling = boto3.client("autoscaling")
    autoscaling.update_auto_scaling_group(AutoScalingGroupName=GROUP, MaxSize=count, DesiredCapacity=count)
    instances = instances_of(GROUP)
    for instance in instances:
        schedule(instance, starts)
    return instances


def health_event_of(instances: list[str], starts: datetime) -> dict[str, Any]:
    event = health_event(instances[0], starts)
    event["detail"]["affectedEntities"] = [{"entityValue": instance} for instance in instances]
    return event


def test_a_health_event_naming_more_instances_than_one_invocation_can_take_in_is_continued_not_repeated(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an AWS Health event naming 80 instances of a managed group, each three AWS calls to take in
    # (their facts read together; at ~0.15 s a call in AWS, 36 s: more than the function's 30 s timeout)
    starts = datetime.now(UTC).replace(microsecond=0) + timedelta(days=3)
    instances = many_scheduled(MANY, starts)
    event = health_event_of(instances, starts)
    latency = AwsLatency(per_call=SLOW_AWS_CALL)
    with latency.counting():
        # When EventBridge invokes intake with it: its time runs out by the AWS calls it makes
        first = LambdaContext(remaining_millis=INTAKE_TIMEOUT_MILLIS, clock=latency)
        with pytest.raises(OutOfTime):
            intake_fn.handler(event, first)

        # Then it stopped before its timeout (Lambda would have killed it mid-call) and failed, so Lambda
        # retries the event; and the retries (two, the function's MaximumRetryAttempts) continue its work
        assert first.get_remaining_time_in_millis() > 0
        taken_in = len(records())
        assert 0 < taken_in < len(instances)
        for _ in range(2):
            retry = LambdaContext(remaining_millis=INTAKE_TIMEOUT_MILLIS, clock=latency)
            try:
                intake_fn.handler(event, retry)
                break
            except OutOfTime:
                assert len(records()) > taken_in  # each attempt takes in more: never the same again
                taken_in = len(records())
            finally:
                assert retry.get_remaining_time_in_millis() > 0

    # and each instance was taken in once: one record and one drain message (due a lead before) each, no
    # duplicate
    assert sorted(record["instance_id"] for record in records()) == sorted(instances)
    assert delayed(stack.drain_queue) == len(instances)
    assert metric(capsys.readouterr().out, "LifecycleEventsDuplicate") == 0


def test_a_batch_whose_time_is_nearly_out_is_returned_to_the_queue_untouched(
    intake_fn: ModuleType, stack: Stack
) -> None:
    # Given a batch of the intake queue: a Health event naming two instances and a Spot interruption
    starts = datetime.now(UTC).replace(microsecond=0) + timedelta(days=3)
    instances = many_scheduled(2, starts)
    spot = ec2_event("eventbridge-spot-interruption.json", instances[0], **{"instance-action": "terminate"})
    batch = sqs_event(health_event_of(instances, starts), spot)

    # When intake receives it with little of its time left (a record before them took the rest)
    response = intake_fn.handler(batch, LambdaContext(remaining_millis=2_000))

    # Then it starts nothing it could not finish: both records fail alone, so SQS delivers both again (a retry
    # on purpose: the invocation does not fail, whose error alarm would page for it)
    assert response == {
        "batchItemFailures": [{"itemIdentifier": "message-1"}, {"itemIdentifier": "message-0"}]
    }
    assert records() == []
    assert work(stack.drain_queue) == []


def test_a_health_event_reached_with_too_little_time_goes_back_to_the_queue_without_a_call(
    intake_fn: ModuleType, stack: Stack
) -> None:
    # Given a record of the intake queue: an AWS Health event naming two instances of a managed group
    starts = datetime.now(UTC).replace(microsecond=0) + timedelta(days=3)
    batch = sqs_event(health_event_of(many_scheduled(2, starts), starts))
    latency = AwsLatency(per_call=AWS_CALL)

    # When intake reaches it with too little time left to start an instance (the records before it took the
    # rest)
    with latency.counting():
        response = intake_fn.handler(batch, LambdaContext(remaining_millis=2_000, clock=latency))
    assert response == {"batchItemFailures": [{"itemIdentifier": "message-0"}]}

    # Then it goes back to the queue untouched: no call (its instances described, its progress read) spends
    # the time the invocation keeps in reserve on instances it will not start
    assert latency.operations == {}


def test_a_hook_notification_batched_after_a_health_event_is_not_sent_back_for_its_time(
    intake_fn: ModuleType, stack: Stack
) -> None:
    # Given a batch of the intake queue: an AWS Health event naming 80 instances of a managed group (three
    # AWS calls each, more than one invocation's time; dead-lettered and sent again, as the runbook says),
    # then a terminate hook notification of the same group (a few calls)
    starts = datetime.now(UTC).replace(microsecond=0) + timedelta(days=3)
    instances = many_scheduled(MANY, starts)
    (hook,) = happening_now(load_event("sqs-hook-terminate.json"))["Records"]
    batch = sqs_event(health_event_of(instances, starts), hook["body"])
    latency = AwsLatency(per_call=SLOW_AWS_CALL)

    # When intake receives it, its time running out by the AWS calls it makes
    with latency.counting():
        response = intake_fn.handler(
            batch, LambdaContext(remaining_millis=INTAKE_TIMEOUT_MILLIS, clock=latency)
        )

    # Then the hook's action is taken in, and only the Health event goes back to the queue, to continue at
    # its next delivery: the notification is not sent back with it for a visibility timeout (its heartbeat
    # timeout running, a receive counted towards the dead-letter queue)
    assert response == {"batchItemFailures": [{"itemIdentifier": "message-0"}]}
    assert HOOK_INSTANCE in {record["instance_id"] for record in records()}


def test_the_instances_a_health_event_names_are_described_together_not_one_by_one(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an AWS Health event naming 31 instances: 25 of a group another stack manages, 5 of this one's,
    # and one EC2 no longer knows
    starts = datetime.now(UTC).replace(microsecond=0) + timedelta(days=3)
    make_group("nodes-of-another-stack")
    boto3.client("autoscaling").update_auto_scaling_group(
        AutoScalingGroupName="nodes-of-another-stack", MaxSize=25, DesiredCapacity=25
    )
    others = instances_of("nodes-of-another-stack")
    ours = many_scheduled(5, starts)
    latency = AwsLatency(per_call=AWS_CALL)

    # When intake receives it
    with latency.counting():
        named = sorted([*others, *ours, "i-0000000000000dead"])
        intake_fn.handler(health_event_of(named, starts), LambdaContext(clock=latency))

    # Then EC2 describes them in one call (a call per instance would spend EC2's request rate, which the
    # account's other tools share, and the invocation's time, on the instances of other stacks); this stack's
    # are taken in
    assert latency.operations["DescribeInstances"] == 1
    assert sorted(record["instance_id"] for record in records()) == sorted(ours)
    assert metric(capsys.readouterr().out, "LifecycleEventsRejected", reason="unknown-instance") == 1
