"""AWS refusing a call to the role (AccessDenied and each service's own shape of it, as the sandbox's IAM
enforcement answers on moto): the adapters say it as the domain's AccessRefused naming the call and the code,
and the step engine retries the step, tells and counts the refusal, and gives the message up in the end."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from nodecycle.adapters.aws.autoscaling import AutoscalingActions
from nodecycle.adapters.aws.instances import Ec2Instances
from nodecycle.adapters.aws.queues import SqsWorkQueues
from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle.domain.engine import MAX_REFUSED_ATTEMPTS, EngineTiming, Handled, StepEngine
from nodecycle.domain.errors import AccessRefused, TransientError
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import (
    ActionRef,
    LifecycleRecord,
    Step,
    Transition,
    adopted_token,
    global_deadline,
)
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.lifecycle import WorkMessage
from nodecycle_sandbox.aws.install import install
from nodecycle_sandbox.iam.identities import IDENTITIES
from nodecycle_sandbox.iam.template import offline_roles
from nodecycle_sandbox.runner.cfn_yaml import load_template
from tests.support.fakes import T0, FakeClock, FakeMetrics, InMemoryRecords, RecordingQueues
from tests.support.stack import Stack

from .test_template_parameters import ROOT

ACCOUNT = "123456789012"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/nodecycle-drain-refused"
KEY = "AKIAREFUSEDDRAIN0001"  # this module's own: no other test's calls are evaluated against its role
ACTION = ActionRef(
    group="nodes-general",
    hook="nodecycle-terminate",
    instance_id="i-0a1b2c3d4e5f60718",
    token="9f0c3d3e-6a8b-4c8e-9d57-2f7b1e0a6c41",
    transition=Transition.TERMINATING,
)


@pytest.fixture
def refused(stack: Stack) -> Callable[[str], Any]:
    """Clients of a role that may do nothing (a service control policy denying all, for a while): every call
    is refused as AWS refuses it (moto with the sandbox's IAM enforcement)."""
    install()  # moto lacks the lifecycle calls: the sandbox adds them, and its IAM enforcement
    # the action's group (a call on a group Auto Scaling does not know is its ValidationError, not a denial)
    boto3.client("ec2").create_launch_template(
        LaunchTemplateName="nodes",
        LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "m6g.large"},
    )
    boto3.client("autoscaling").create_auto_scaling_group(
        AutoScalingGroupName=ACTION.group,
        LaunchTemplate={"LaunchTemplateName": "nodes"},
        MinSize=0,
        MaxSize=1,
        AvailabilityZones=["eu-west-1a"],
    )
    IDENTITIES.register(
        roles=[{"arn": ROLE, "policies": []}],
        keys=[{"access_key": KEY, "role_arn": ROLE, "session_name": "drain", "account": ACCOUNT}],
    )
    return lambda service: boto3.client(  # type: ignore[call-overload]
        service, aws_access_key_id=KEY, aws_secret_access_key="refused"
    )


@pytest.mark.parametrize(
    ("service", "call", "code", "what"),
    [
        ("autoscaling", lambda c, s: AutoscalingActions(c).complete(ACTION, ActionResult.CONTINUE),
         "AccessDenied", "completing a lifecycle action"),
        ("autoscaling", lambda c, s: AutoscalingActions(c).heartbeat(ACTION),
         "AccessDenied", "recording a lifecycle heartbeat"),
        ("dynamodb", lambda c, s: DynamoRecordStore(s.table, timedelta(days=1), c).get("i-0a1b2c3d4e5f60718/terminate/t"),
         "AccessDeniedException", "reading a lifecycle record"),
        ("sqs", lambda c, s: SqsWorkQueues({Worker.DRAIN: s.drain_queue}, c).send(
            Worker.DRAIN, WorkMessage(record_id="i-0a1b2c3d4e5f60718/terminate/t", seq=1, step=Step.EVICT)),
         "AccessDenied", "sending work to the drain queue"),
        ("ec2", lambda c, s: Ec2Instances(c).states(["i-0a1b2c3d4e5f60718"]),
         "UnauthorizedOperation", "describing instances"),
    ],
    ids=["complete", "heartbeat", "dynamodb-get", "sqs-send", "ec2-describe"],
)  # fmt: skip
def test_a_call_the_role_is_refused_is_an_access_refusal_naming_the_call_and_the_code(
    refused: Callable[[str], Any],
    stack: Stack,
    service: str,
    call: Callable[[Any, Stack], object],
    code: str,
    what: str,
) -> None:
    # Given a role every call of which is denied
    # When an adapter makes its call
    with pytest.raises(AccessRefused) as raised:
        call(refused(service), stack)
    # Then it is a refusal naming the call and AWS's code, never an answer (a completion refused is not "no
    # active lifecycle action": that would settle the action as if it had been completed)
    assert (raised.value.call, raised.value.code) == (what, code)
    assert "is not authorized to perform" in str(raised.value)


def _record(**changes: Any) -> LifecycleRecord:
    record = LifecycleRecord(
        id=f"{ACTION.instance_id}/terminate/{ACTION.token}",
        owner="stack-a",
        instance_id=ACTION.instance_id,
        transition=Transition.TERMINATING,
        token=ACTION.token,
        group=ACTION.group,
        hook=ACTION.hook,
        plan=(Step.ACQUIRE_SLOT, Step.CORDON, Step.EVICT, Step.COMPLETE, Step.CLEANUP, Step.DONE),
        step=Step.ACQUIRE_SLOT,
        received_at=T0,
        started_at=T0,
        updated_at=T0,
        due_at=T0,
        heartbeat_timeout=300,
        heartbeat_deadline=T0 + timedelta(seconds=300),
        global_deadline=global_deadline(T0, 300),
    )
    return record.model_copy(update=changes)


@pytest.fixture
def engine_refused_heartbeats(
    refused: Callable[[str], Any],
) -> tuple[StepEngine, InMemoryRecords, FakeMetrics, list[LifecycleRecord]]:
    """The drain's engine whose Auto Scaling adapter is refused: its first disruptive step's confirmation
    (a look at where the instance is, then a heartbeat with the action's token) is denied. The step itself records
    what it was asked."""
    records, metrics, ran = InMemoryRecords(), FakeMetrics(), []

    def acquire(record: LifecycleRecord, now: Any) -> Any:
        ran.append(record)
        raise AssertionError("a step that Auto Scaling did not confirm ran")

    engine = StepEngine(
        worker=Worker.DRAIN,
        steps={Step.ACQUIRE_SLOT: acquire},
        records=records,
        queues=RecordingQueues(),
        autoscaling=AutoscalingActions(refused("autoscaling")),
        clock=FakeClock(),
        metrics=metrics,
        timing=EngineTiming(
            resume_grace=timedelta(minutes=3),
            heartbeat_margin=timedelta(seconds=60),
            redelivery=timedelta(0),
            settle_before=timedelta(seconds=60),
        ),
        failure_result=lambda record: ActionResult.ABANDON,
    )
    return engine, records, metrics, ran


def test_a_step_whose_aws_call_is_refused_is_retried_with_backoff_told_and_counted(
    engine_refused_heartbeats: tuple[StepEngine, InMemoryRecords, FakeMetrics, list[LifecycleRecord]],
) -> None:
    engine, records, metrics, ran = engine_refused_heartbeats
    # Given a lifecycle whose action is not confirmed yet, and Auto Scaling's calls denied
    record = _record()
    records.create(record)
    # When its first step runs
    handled = engine.handle(WorkMessage(record_id=record.id, seq=record.seq, step=record.step))
    # Then the step is retried later by the engine (not failed for SQS to redeliver and dead-letter), it
    # disrupted nothing, and the refusal is on the record and counted
    after = records.get(record.id)
    assert after is not None
    assert handled is Handled.RAN
    assert (after.step, after.attempts, after.seq) == (Step.ACQUIRE_SLOT, 1, record.seq + 1)
    assert after.due_at > T0
    assert after.verified_at is None
    assert "reading an instance's group and lifecycle state: refused (AccessDenied)" in (
        after.last_error or ""
    )
    assert metrics.counts["StepRetries[reason=refused]"] == 1
    assert not ran


def test_a_step_refused_again_and_again_fails_its_message_for_the_dead_letter_queue(
    engine_refused_heartbeats: tuple[StepEngine, InMemoryRecords, FakeMetrics, list[LifecycleRecord]],
) -> None:
    engine, records, metrics, ran = engine_refused_heartbeats
    # Given a step refused as often in a row as the engine retries a refusal, but once
    record = _record(attempts=MAX_REFUSED_ATTEMPTS - 1, refusals=MAX_REFUSED_ATTEMPTS - 1)
    records.create(record)
    # When it is refused once more
    with pytest.raises(AccessRefused):
        engine.handle(WorkMessage(record_id=record.id, seq=record.seq, step=record.step))
    # Then its message fails (delivered again, then dead-lettered: the alarm), the record as it was
    assert records.get(record.id) == record
    assert metrics.counts["StepRetries[reason=refused]"] == 1
    assert not ran


def _drain_role_on(
    parameters: dict[str, str], tags: dict[str, str], deleted: bool, key: str
) -> tuple[AutoscalingActions, ActionRef]:
    """The Auto Scaling port of the drain function's role as the template grants it under ``parameters``, and the
    action to call it on: the action's group, tagged ``tags``, either deleted since (``deleted``: ForceDelete ends
    its actions with it), or still there with an instance in service, the one the action names."""
    install()
    boto3.client("ec2").create_launch_template(
        LaunchTemplateName="nodes",
        LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "m6g.large"},
    )
    autoscaling = boto3.client("autoscaling")
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=ACTION.group,
        LaunchTemplate={"LaunchTemplateName": "nodes"},
        MinSize=0,
        MaxSize=1,
        AvailabilityZones=["eu-west-1a"],
        Tags=[{"Key": k, "Value": v, "PropagateAtLaunch": True} for k, v in tags.items()],
    )
    if deleted:
        autoscaling.delete_auto_scaling_group(AutoScalingGroupName=ACTION.group, ForceDelete=True)
        action = ACTION
    else:
        autoscaling.set_desired_capacity(AutoScalingGroupName=ACTION.group, DesiredCapacity=1)
        (listed,) = autoscaling.describe_auto_scaling_instances()["AutoScalingInstances"]
        action = ACTION.model_copy(update={"instance_id": listed["InstanceId"]})
    template = load_template(ROOT / "template.yaml")
    role = offline_roles(template, {"ClusterName": "prod", **parameters})["DrainFunctionRole"]
    IDENTITIES.register(
        roles=[role],
        keys=[{"access_key": key, "role_arn": role["arn"], "session_name": "drain", "account": ACCOUNT}],
    )
    return AutoscalingActions(
        boto3.client("autoscaling", aws_access_key_id=key, aws_secret_access_key="drain")
    ), action


OWNED = {"nodecycle:owner": "nodecycle"}  # (the owner offline_roles grants a stack managing groups by tag)
HEARTBEAT = ("recording a lifecycle heartbeat", lambda port, action: port.heartbeat(action))
COMPLETION = (
    "completing a lifecycle action",
    lambda port, action: port.complete(action, ActionResult.CONTINUE),
)


@pytest.mark.parametrize("call", [HEARTBEAT, COMPLETION], ids=["heartbeat", "complete"])
@pytest.mark.parametrize(
    "parameters",
    [
        pytest.param({"ManagedGroups": ACTION.group}, id="by-name"),
        pytest.param({"ManagedByTag": "true"}, id="by-tag"),
    ],
)
def test_a_heartbeat_of_an_action_gone_with_its_group_is_settled_whether_groups_are_named_or_tagged(
    stack: Stack,
    parameters: dict[str, str],
    call: tuple[str, Callable[[AutoscalingActions, ActionRef], bool]],
) -> None:
    # Given the drain function's role as the template grants it, and the action's group deleted since (ForceDelete
    # ends its actions with it)
    port, action = _drain_role_on(parameters, OWNED, deleted=True, key="AKIAGONEGROUPDRAIN01")
    # When it heartbeats (or completes) the action, Then the action is gone (settled), as a name-scoped role hears
    # it from Auto Scaling; a tag-scoped role is refused by IAM instead (a group that does not exist has no tag for
    # the grant's condition to read): told as a refusal, the step retried to the dead-letter queue and
    # HeartbeatsRefusedAlarm paged for a group deleted on purpose. Where the instance is tells them apart
    # (DescribeAutoScalingInstances, which every role holds): one Auto Scaling no longer lists in the action's
    # group has no action there.
    assert call[1](port, action) is False


@pytest.mark.parametrize("call", [HEARTBEAT, COMPLETION], ids=["heartbeat", "complete"])
def test_a_call_refused_on_a_group_that_still_lists_the_instance_stays_a_refusal(
    stack: Stack, call: tuple[str, Callable[[AutoscalingActions, ActionRef], bool]]
) -> None:
    # Given a stack managing its groups by tag, and the action's group, still there and listing the instance, not
    # tagged for it (its tag edited away, or another stack's)
    port, action = _drain_role_on(
        {"ManagedByTag": "true"},
        {"nodecycle:owner": "another-stack"},
        deleted=False,
        key="AKIATAGGEDOTHERS0001",
    )
    # When the action is heartbeated (or completed), Then IAM's refusal is a refusal, naming the call: a
    # permission missing stays loud (retried, its alarm, the dead-letter queue), never taken for an action gone
    with pytest.raises(AccessRefused) as raised:
        call[1](port, action)
    assert (raised.value.call, raised.value.code) == (call[0], "AccessDenied")


_DENIED: dict[str, Any] = {
    "service_error_code": "AccessDenied",
    "service_message": "is not authorized to perform",
    "http_status_code": 403,
}


def _listed(group: str) -> dict[str, Any]:
    return {
        "AutoScalingInstances": [
            {
                "InstanceId": ACTION.instance_id,
                "AutoScalingGroupName": group,
                "AvailabilityZone": "eu-west-1a",
                "LifecycleState": "Terminating:Wait",
                "HealthStatus": "HEALTHY",
                "ProtectedFromScaleIn": False,
            }
        ]
    }


@pytest.mark.parametrize(
    ("look", "expected"),
    [
        pytest.param({"service_response": _listed("nodes-other")}, False, id="in-another-group"),
        pytest.param({"service_response": {"AutoScalingInstances": []}}, False, id="in-no-group"),
        # (Auto Scaling still lists a deleted group's instances for a while: refused, retried until it does not)
        pytest.param({"service_response": _listed(ACTION.group)}, AccessRefused, id="still-in-its-group"),
        pytest.param(_DENIED, AccessRefused, id="look-refused"),
        pytest.param(
            {"service_error_code": "Throttling", "service_message": "Rate exceeded", "http_status_code": 400},
            TransientError,
            id="look-throttled",
        ),
    ],
)  # fmt: skip
def test_a_refused_heartbeat_is_settled_only_where_the_instance_is_no_longer_in_its_group(
    look: dict[str, Any], expected: bool | type[Exception]
) -> None:
    client = boto3.client("autoscaling", region_name="eu-west-1")
    with Stubber(client) as stubber:
        stubber.add_client_error("record_lifecycle_action_heartbeat", **_DENIED)
        if "service_response" in look:
            stubber.add_response("describe_auto_scaling_instances", look["service_response"])
        else:
            stubber.add_client_error("describe_auto_scaling_instances", **look)
        if isinstance(expected, bool):
            assert AutoscalingActions(client).heartbeat(ACTION) is expected
        else:
            with pytest.raises(expected) as raised:
                AutoscalingActions(client).heartbeat(ACTION)
            # (a refused look tells nothing: the heartbeat's own refusal, as its alarm counts it)
            if expected is AccessRefused:
                assert raised.value.call == "recording a lifecycle heartbeat"  # type: ignore[attr-defined]
            else:
                assert not isinstance(raised.value, AccessRefused)
        stubber.assert_no_pending_responses()


def _port_of(role_name: str, key: str) -> AutoscalingActions:
    """The Auto Scaling port of one function's role as the template grants it with ManagedByTag=true."""
    template = load_template(ROOT / "template.yaml")
    role = offline_roles(template, {"ClusterName": "prod", "ManagedByTag": "true"})[role_name]
    IDENTITIES.register(
        roles=[role],
        keys=[{"access_key": key, "role_arn": role["arn"], "session_name": "gone", "account": ACCOUNT}],
    )
    return AutoscalingActions(
        boto3.client("autoscaling", aws_access_key_id=key, aws_secret_access_key="gone"),
        boto3.client("ec2", aws_access_key_id=key, aws_secret_access_key="gone"),
    )


ADOPTED = ACTION.model_copy(update={"token": adopted_token(ACTION.hook)})  # (named by its instance alone)


# What each function asks about a group (or its instance, or an action of it) that can disappear, by the role that
# asks it, and what it answers once the group is gone
ASKED: dict[str, tuple[str, Callable[[AutoscalingActions], object], object]] = {
    "intake-hook": ("IntakeFunctionRole", lambda port: port.hook(ACTION.group, ACTION.hook), None),
    "intake-group-tags": ("IntakeFunctionRole", lambda port: port.group_tags(ACTION.group), None),
    "intake-membership": ("IntakeFunctionRole", lambda port: port.membership(ACTION.instance_id).group, None),
    "intake-heartbeat": ("IntakeFunctionRole", lambda port: port.heartbeat(ACTION), False),
    "drain-lifecycle-state": (
        "DrainFunctionRole",
        lambda port: port.lifecycle_state(ACTION.instance_id),
        None,
    ),
    "eip-membership": ("EipFunctionRole", lambda port: port.membership(ACTION.instance_id).group, None),
    "eip-confirm": ("EipFunctionRole", lambda port: port.confirm(ACTION), False),
    "eip-complete-adopted": (
        "EipFunctionRole",
        lambda port: port.complete(ADOPTED, ActionResult.CONTINUE),
        False,
    ),
    "sweeper-hooks": ("SweeperFunctionRole", lambda port: port.hooks_of(ACTION.group), {}),
    "sweeper-held-instances": (
        "SweeperFunctionRole",
        lambda port: port.waiting_instances((ACTION.group,), "nodecycle"),
        [],
    ),
    "sweeper-warm-pool": ("SweeperFunctionRole", lambda port: port._warm_pool(ACTION.group), []),
    "sweeper-complete-adopted": (
        "SweeperFunctionRole",
        lambda port: port.complete(ADOPTED, ActionResult.CONTINUE),
        False,
    ),
    "sweeper-heartbeat-adopted": ("SweeperFunctionRole", lambda port: port.heartbeat(ADOPTED), False),
}


def test_every_call_on_a_group_deleted_answers_it_gone_to_roles_granted_by_tag(stack: Stack) -> None:
    # Given a stack managing its groups by tag, and a group of its (with a warm pool) force-deleted while its
    # actions were open
    install()
    boto3.client("ec2").create_launch_template(
        LaunchTemplateName="nodes",
        LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "m6g.large"},
    )
    autoscaling = boto3.client("autoscaling")
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=ACTION.group,
        LaunchTemplate={"LaunchTemplateName": "nodes"},
        MinSize=0,
        MaxSize=1,
        AvailabilityZones=["eu-west-1a"],
        Tags=[{"Key": k, "Value": v, "PropagateAtLaunch": True} for k, v in OWNED.items()],
    )
    autoscaling.put_warm_pool(AutoScalingGroupName=ACTION.group, MinSize=0)
    autoscaling.delete_auto_scaling_group(AutoScalingGroupName=ACTION.group, ForceDelete=True)
    ports = {
        role: _port_of(role, f"AKIAGONE{role.removesuffix('FunctionRole').upper():0<12}")
        for role in {role for role, _, _ in ASKED.values()}
    }

    # When each function whose role makes a call makes it
    answers: dict[str, object] = {}
    for name, (role, call, _) in ASKED.items():
        try:
            answers[name] = call(ports[role])
        except AccessRefused as refused:
            answers[name] = refused.code

    # Then each answers the group, its hooks, its instances and actions gone, none refused to a role granted by tag:
    # Auto Scaling's describe calls have no resource-level permissions (granted on "*", read with no tag); an
    # adopted action's completion and the engine's confirmation ask where the instance is first; a refused
    # heartbeat looks where it is (before, the two heartbeats were AccessDenied)
    assert answers == {name: gone for name, (_, _, gone) in ASKED.items()}
