"""The intake function on moto: records, first units of work, duplicates, unmanaged groups, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import boto3
import pytest

from nodecycle.adapters.clock import SystemClock
from nodecycle.domain.model import Step, Transition
from nodecycle_sandbox.aws.install import install
from tests.functions.intake.conftest import GROUP, HEARTBEAT_TIMEOUT, make_group
from tests.support.emf import metric
from tests.support.events import happening_now, load_event, sqs_event
from tests.support.functions import LambdaContext
from tests.support.stack import Stack, receive_all

TERMINATING_INSTANCE = "i-0a1b2c3d4e5f60718"


def records() -> list[dict[str, Any]]:
    """The lifecycle records (the table's other items are their actions' claims: see ActionClaim)."""
    items = boto3.resource("dynamodb").Table("nodecycle-lifecycle").scan()["Items"]
    return sorted((item for item in items if "step" in item), key=lambda item: str(item["id"]))


def work(queue_url: str) -> list[dict[str, Any]]:
    return [json.loads(message["Body"]) for message in receive_all(queue_url)]


def test_a_terminate_action_from_eventbridge_becomes_a_record_and_a_drain_message(
    intake_fn: ModuleType, stack: Stack
) -> None:
    # Given a terminate lifecycle action of a managed group, delivered by EventBridge
    event = happening_now(load_event("eventbridge-terminate.json"))

    # When intake receives it
    intake_fn.handler(event, LambdaContext())

    # Then one record describes the action and the drain queue holds its first step
    (record,) = records()
    assert record["instance_id"] == TERMINATING_INSTANCE
    assert record["transition"] == Transition.TERMINATING.value
    assert record["step"] == Step.ACQUIRE_SLOT.value
    assert record["owner"] == "stack-a"
    assert record["open_owner"] == "stack-a"  # in the sweeper's index while open
    assert int(record["expires_at"]) > 0  # the TTL attribute
    assert record["heartbeat_timeout"] == HEARTBEAT_TIMEOUT
    assert work(stack.drain_queue) == [{"record_id": record["id"], "seq": 0, "step": "acquire-slot"}]
    assert work(stack.eip_queue) == []


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("eventbridge-terminate.json", "sqs-hook-terminate.json"),
        ("sqs-hook-terminate.json", "sqs-eventbridge-terminate.json"),
        ("eventbridge-terminate.json", "eventbridge-terminate.json"),
    ],
)
def test_the_same_action_delivered_twice_makes_one_record_and_one_unit_of_work(
    intake_fn: ModuleType, stack: Stack, first: str, second: str
) -> None:
    # Given the same lifecycle action delivered by two paths
    # When intake receives both
    for name in (first, second):
        result = intake_fn.handler(happening_now(load_event(name)), LambdaContext())
        assert not (result or {}).get("batchItemFailures")

    # Then there is one record and one message
    assert len(records()) == 1
    assert len(work(stack.drain_queue)) == 1


def test_a_launch_goes_to_the_eip_queue_when_eip_mode_is_on(
    intake_fn: ModuleType, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "allocate")
    intake_fn.handler(happening_now(load_event("eventbridge-launch.json")), LambdaContext())
    assert [m["step"] for m in work(stack.eip_queue)] == [Step.ASSIGN_EIP.value]
    assert work(stack.drain_queue) == []
    (record,) = records()
    assert record["plan"] == ["assign-eip", "ready-gate", "complete", "done"]


def test_a_launch_goes_to_the_readiness_gate_when_eip_mode_is_off(
    intake_fn: ModuleType, stack: Stack
) -> None:
    intake_fn.handler(happening_now(load_event("sqs-hook-launch.json")), LambdaContext())
    assert [m["step"] for m in work(stack.drain_queue)] == [Step.READY_GATE.value]
    assert work(stack.eip_queue) == []


def test_a_launch_into_a_warm_pool_is_completed_without_gate_or_address(
    intake_fn: ModuleType, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "allocate")
    intake_fn.handler(happening_now(load_event("eventbridge-launch-into-warm-pool.json")), LambdaContext())
    (record,) = records()
    assert record["plan"] == ["complete", "done"]
    # nothing to drain or gate: completed by the function that does not load the Kubernetes client
    assert [m["step"] for m in work(stack.eip_queue)] == ["complete"]
    assert work(stack.drain_queue) == []


def test_a_group_this_stack_does_not_manage_is_ignored_without_error(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an action of a group that is neither named in the settings nor tagged for this owner
    make_group("nodes-other")
    event = happening_now(load_event("eventbridge-terminate.json"))
    event["detail"]["AutoScalingGroupName"] = "nodes-other"

    # When intake receives it
    intake_fn.handler(event, LambdaContext())

    # Then nothing is written or sent, and no error is logged
    assert records() == []
    assert work(stack.drain_queue) == []
    output = capsys.readouterr().out
    assert '"level":"ERROR"' not in output
    assert metric(output, "LifecycleActionsIgnored") == 1


def test_another_tools_hook_on_a_managed_group_is_left_to_that_tool(
    intake_fn: ModuleType, stack: Stack
) -> None:
    # Given an action of a hook this stack does not answer (say, a deployment tool's) on a managed group
    boto3.client("autoscaling").put_lifecycle_hook(
        AutoScalingGroupName=GROUP,
        LifecycleHookName="deploy-tool-terminate",
        LifecycleTransition="autoscaling:EC2_INSTANCE_TERMINATING",
        HeartbeatTimeout=HEARTBEAT_TIMEOUT,
    )
    event = happening_now(load_event("eventbridge-terminate.json"))
    event["detail"]["LifecycleHookName"] = "deploy-tool-terminate"

    # When intake receives it, nothing is recorded, so nodecycle will never complete that tool's action
    intake_fn.handler(event, LambdaContext())
    assert records() == []
    assert work(stack.drain_queue) == []


def test_groups_tagged_with_the_owner_are_managed_and_their_tags_read_once(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a stack that manages groups by tag, one tagged group and one tagged for another owner
    monkeypatch.setenv("NODECYCLE_MANAGED_GROUPS", "")
    monkeypatch.setenv("NODECYCLE_MANAGED_BY_TAG", "true")
    make_group("tagged", tags={"nodecycle:owner": "stack-a"})
    make_group("theirs", tags={"nodecycle:owner": "stack-b"})
    intake_fn = _fresh_intake()
    calls: list[str] = []

    def count(model: Any, **_: Any) -> None:
        calls.append(model.name)

    from nodecycle.wiring.intake import shared

    shared().autoscaling._asg().meta.events.register(
        "before-call.auto-scaling.DescribeAutoScalingGroups", count
    )

    # When three actions of the tagged group (three instances) and one of the other owner's group arrive
    for n in range(3):
        event = happening_now(load_event("eventbridge-terminate.json"))
        event["detail"]["AutoScalingGroupName"] = "tagged"
        event["detail"]["LifecycleActionToken"] = str(uuid.uuid4())
        event["detail"]["EC2InstanceId"] = f"i-0a1b2c3d4e5f6071{n}"
        intake_fn.handler(event, LambdaContext())
    theirs = happening_now(load_event("eventbridge-terminate.json"))
    theirs["detail"]["AutoScalingGroupName"] = "theirs"
    intake_fn.handler(theirs, LambdaContext())

    # Then the tagged group's actions are recorded, the other owner's is not, and each group's tags were
    # read once
    assert len(records()) == 3
    assert calls.count("DescribeAutoScalingGroups") == 2


def _fresh_intake() -> ModuleType:
    from tests.support.functions import load_function

    return load_function("intake")


def test_a_test_notification_is_acknowledged_and_dropped(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    result = intake_fn.handler(load_event("sqs-test-notification.json"), LambdaContext())
    assert result == {"batchItemFailures": []}
    assert records() == []
    assert "test notification for group nodes-general acknowledged" in capsys.readouterr().out


def test_bad_records_are_dropped_with_a_reason_and_never_fail_their_batch(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a batch with two valid actions and every kind of bad record
    event = happening_now(load_event("sqs-mixed-batch.json"))

    # When intake processes it
    result = intake_fn.handler(event, LambdaContext())

    # Then no record fails the batch, the two valid actions are recorded, and each bad one is counted by reason
    assert result == {"batchItemFailures": []}
    assert {record["instance_id"] for record in records()} == {TERMINATING_INSTANCE, "i-0fedcba9876543210"}
    output = capsys.readouterr().out
    for reason in ("malformed-json", "unknown-shape", "unknown-transition", "missing-field", "wrong-source"):
        assert metric(output, "LifecycleEventsRejected", reason=reason) == 1, reason
    errors = [json.loads(line) for line in output.splitlines() if '"level":"ERROR"' in line]
    assert len(errors) == 5
    assert any("LifecycleActionToken is missing" in line["message"] for line in errors)


def test_a_notification_whose_time_no_aws_service_writes_is_rejected_not_retried(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a batch with a valid action and a hook notification whose Time is at the calendar's end (its
    # deadlines, Time + the hook's timeouts, overflow it)
    valid = happening_now(load_event("sqs-hook-terminate.json"))["Records"][0]["body"]
    forged = {
        **json.loads(valid),
        "Time": "9999-12-31T23:59:59Z",
        "EC2InstanceId": "i-0123456789abcdef0",
        "LifecycleActionToken": "11111111-2222-4333-8444-555555555555",
    }

    # When intake processes it
    result = intake_fn.handler(sqs_event(valid, forged), LambdaContext())

    # Then the bad record is dropped with a reason that names its field, never retried into the dead-letter
    # queue (the same bytes can never succeed), and the valid one is recorded
    assert result == {"batchItemFailures": []}
    assert [record["instance_id"] for record in records()] == [json.loads(valid)["EC2InstanceId"]]
    output = capsys.readouterr().out
    assert metric(output, "LifecycleEventsRejected", reason="invalid-field") == 1
    assert "Time" in next(
        json.loads(line)["message"] for line in output.splitlines() if '"level":"ERROR"' in line
    )


def test_a_bad_eventbridge_event_is_logged_and_not_retried(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    event = happening_now(load_event("eventbridge-terminate.json"))
    event["detail"]["LifecycleTransition"] = "autoscaling:EC2_INSTANCE_REBOOTING"
    intake_fn.handler(event, LambdaContext())  # returns: an exception would make Lambda retry it
    assert records() == []
    output = capsys.readouterr().out
    assert metric(output, "LifecycleEventsRejected", reason="unknown-transition") == 1


def test_a_record_that_fails_for_a_retryable_reason_alone_is_reported_to_sqs(
    intake_fn: ModuleType, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a batch of two valid actions where writing the second one's work message is throttled
    first = load_event("sqs-hook-terminate.json")["Records"][0]["body"]
    second = json.loads(first)
    second["EC2InstanceId"] = "i-0123456789abcdef0"
    second["LifecycleActionToken"] = str(uuid.uuid4())
    event = happening_now(sqs_event(first, second))
    from botocore.exceptions import ClientError

    from nodecycle.wiring.intake import shared

    queues = shared().queues
    original = queues.send

    def throttled(worker: Any, message: Any, delay_seconds: int = 0) -> None:
        if message.record_id.startswith("i-0123456789abcdef0"):
            raise ClientError({"Error": {"Code": "Throttling", "Message": "Rate exceeded"}}, "SendMessage")
        original(worker, message, delay_seconds)

    monkeypatch.setattr(queues, "send", throttled)

    # When intake processes the batch
    result = intake_fn.handler(event, LambdaContext())

    # Then only the throttled record is reported as failed, so SQS retries it (and dead-letters it at last)
    assert result == {"batchItemFailures": [{"itemIdentifier": "message-1"}]}
    assert len(work(stack.drain_queue)) == 1


def test_an_invalid_setting_stops_the_function_with_a_message_that_names_it(
    intake_fn: ModuleType, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NODECYCLE_RECORD_TTL_DAYS", "two weeks")
    with pytest.raises(ValueError, match="NODECYCLE_RECORD_TTL_DAYS"):
        intake_fn.handler(happening_now(load_event("eventbridge-terminate.json")), LambdaContext())
    assert records() == []


def test_intake_does_not_validate_the_settings_only_other_functions_use(
    intake_fn: ModuleType, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a drain setting that the drain function would refuse
    monkeypatch.setenv("NODECYCLE_DRAIN_TIMEOUT_SECONDS", "ten minutes")
    monkeypatch.setenv("NODECYCLE_BUDGET_HOLDER_TTL_SECONDS", "1")
    # When intake receives an action, Then it records it: intake uses neither setting
    intake_fn.handler(happening_now(load_event("eventbridge-terminate.json")), LambdaContext())
    assert len(records()) == 1


def test_an_action_of_a_group_whose_hook_is_gone_is_dropped(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    boto3.client("autoscaling").delete_lifecycle_hook(
        AutoScalingGroupName=GROUP, LifecycleHookName="nodecycle-terminate"
    )
    intake_fn.handler(happening_now(load_event("eventbridge-terminate.json")), LambdaContext())
    assert records() == []
    assert metric(capsys.readouterr().out, "LifecycleEventsRejected", reason="unknown-hook") == 1


def test_an_action_of_a_group_deleted_since_is_dropped_not_retried(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the sandbox's Auto Scaling, which answers as AWS does for a group it does not know (a
    # ValidationError from DescribeLifecycleHooks: moto alone answers an empty list), and a managed group
    # deleted (ForceDelete) after Auto Scaling sent a terminate action of one of its instances
    install()
    boto3.client("autoscaling").delete_auto_scaling_group(AutoScalingGroupName=GROUP, ForceDelete=True)

    # When intake receives the action, by EventBridge and by the queue (both sent before intake read the hook:
    # a notification dated in a later second than that read would be retried, to read the hook again)
    by_eventbridge = happening_now(load_event("eventbridge-terminate.json"))
    by_queue = happening_now(load_event("sqs-hook-terminate.json"))
    intake_fn.handler(by_eventbridge, LambdaContext())
    response = intake_fn.handler(by_queue, LambdaContext())

    # Then it is dropped as an action of a hook that does not exist: no record, no retry, no dead letter
    assert records() == []
    assert response == {"batchItemFailures": []}
    assert metric(capsys.readouterr().out, "LifecycleEventsRejected", reason="unknown-hook") == 2


def test_metrics_count_received_actions_by_transition(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    intake_fn.handler(happening_now(load_event("eventbridge-terminate.json")), LambdaContext())
    intake_fn.handler(happening_now(load_event("eventbridge-launch.json")), LambdaContext())
    output = capsys.readouterr().out
    assert metric(output, "LifecycleActionsReceived", transition="terminate") == 1
    assert metric(output, "LifecycleActionsReceived", transition="launch") == 1


def test_logs_carry_the_instance_and_token_as_correlation_ids(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    intake_fn.handler(happening_now(load_event("eventbridge-terminate.json")), LambdaContext())
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"accepted' in line]
    assert lines
    assert lines[0]["instance_id"] == TERMINATING_INSTANCE
    assert lines[0]["correlation_id"] == "9f0c3d3e-6a8b-4c8e-9d57-2f7b1e0a6c41"


def test_one_records_log_keys_do_not_follow_the_next_record_of_its_batch(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a batch of a valid terminate action followed by a body that is not JSON
    event = happening_now(load_event("sqs-hook-terminate.json"))
    valid = event["Records"][0]["body"]

    # When intake handles it
    intake_fn.handler(sqs_event(valid, "{not json"), LambdaContext())

    # Then the rejection's log line carries its own message id and none of the first record's keys
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    accepted = next(line for line in lines if str(line.get("message", "")).startswith("accepted"))
    rejected = next(line for line in lines if str(line.get("message", "")).startswith("rejected"))
    assert accepted["message_id"] == "message-0"
    assert accepted["correlation_id"] == accepted["lifecycle_token"]
    assert rejected["message_id"] == "message-1"
    assert not {"instance_id", "lifecycle_token", "correlation_id"} & set(rejected)


def test_the_intake_function_does_not_import_the_kubernetes_client() -> None:
    code = (
        "import sys; sys.path[:0] = ['.']; from tests.support.functions import load_function; "
        "load_function('intake'); print('kubernetes' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_a_lowered_hook_timeout_reaches_a_warm_intake_within_minutes(
    intake_fn: ModuleType, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the sandbox's Auto Scaling (moto alone has no RecordLifecycleActionHeartbeat, which intake asks of an
    # earlier action still open on its record: run alone, the test met moto's NotImplementedError; after another test
    # had installed it, it passed), and a warm intake that has read the terminate hook's heartbeat timeout (300 s) for
    # a first action
    install()
    first = happening_now(load_event("eventbridge-terminate.json"))
    intake_fn.handler(first, LambdaContext())
    # When an operator lowers the hook's heartbeat timeout (still above the margin plus a redelivery, 210 s:
    # below that, intake heartbeats every action it accepts), and a new action arrives ten minutes later
    boto3.client("autoscaling").put_lifecycle_hook(
        AutoScalingGroupName=GROUP,
        LifecycleHookName="nodecycle-terminate",
        LifecycleTransition="autoscaling:EC2_INSTANCE_TERMINATING",
        HeartbeatTimeout=240,
        DefaultResult="ABANDON",
    )
    later = datetime.now(UTC) + timedelta(minutes=10)
    monkeypatch.setattr(SystemClock, "now", lambda self: later)
    second = happening_now(load_event("eventbridge-terminate.json"))
    second["time"] = later.isoformat()
    second["detail"]["LifecycleActionToken"] = str(uuid.uuid4())
    intake_fn.handler(second, LambdaContext())

    # Then the new action's record times its heartbeats by the lowered timeout, not the cached one
    timeouts = sorted(int(item["heartbeat_timeout"]) for item in records())
    assert timeouts == [240, 300]


def test_a_notification_too_large_for_its_record_is_rejected_not_retried(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a batch with a valid action and a hook notification (sent to the queue by someone allowed to send
    # to it: a queue takes messages of up to 1 MiB) whose NotificationMetadata is larger than any hook's (Auto
    # Scaling takes 1,023 characters) and than a DynamoDB item can hold (400 KB)
    valid = happening_now(load_event("sqs-hook-terminate.json"))["Records"][0]["body"]
    oversized = {
        **json.loads(valid),
        "EC2InstanceId": "i-0123456789abcdef0",
        "LifecycleActionToken": str(uuid.uuid4()),
        "NotificationMetadata": "x" * 450_000,
    }

    # When intake processes it
    result = intake_fn.handler(sqs_event(valid, oversized), LambdaContext())

    # Then the oversized record is dropped with a reason that names its field, never retried into the
    # dead-letter queue (the same bytes can never be written), and the valid one is recorded
    assert result == {"batchItemFailures": []}
    assert [record["instance_id"] for record in records()] == [json.loads(valid)["EC2InstanceId"]]
    output = capsys.readouterr().out
    assert metric(output, "LifecycleEventsRejected", reason="invalid-field") == 1
    assert "NotificationMetadata" in next(
        json.loads(line)["message"] for line in output.splitlines() if '"level":"ERROR"' in line
    )
