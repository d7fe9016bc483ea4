"""The sweeper's repair of the lifecycles of a group force-deleted while its actions were open (ForceDelete ends
them with it), in a stack that manages its groups by tag: its role is granted the lifecycle calls on the groups
tagged for it, and IAM refuses them on a group that no longer exists (no tag left for the grant's condition: the
sandbox's IAM enforcement on moto, with the template's own role). Each such record is settled once, as a stack
naming its groups settles it on Auto Scaling's "No active Lifecycle Action": not raised at every sweep
(SweeperErrorsAlarm) until the records' expiry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from nodecycle.adapters.aws.autoscaling import AutoscalingActions
from nodecycle.domain.completion import CompleteAction
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.model import LifecycleRecord, Step, Transition, global_deadline
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.sweep.lifecycles import LifecycleRepair
from nodecycle_sandbox.aws.install import install
from nodecycle_sandbox.iam.identities import IDENTITIES
from nodecycle_sandbox.iam.template import offline_roles
from nodecycle_sandbox.runner.cfn_yaml import load_template
from tests.functions.test_template_parameters import ROOT
from tests.support.fakes import FakeClock, FakeMetrics, InMemoryRecords, RecordingQueues
from tests.support.stack import Stack
from tests.unit.sweeper.test_orphans import AMPLE

ACCOUNT = "123456789012"
GROUP = "nodes-general"
INSTANCE = "i-0a1b2c3d4e5f60718"
TOKEN = "9f0c3d3e-6a8b-4c8e-9d57-2f7b1e0a6c41"
KEY = "AKIASWEEPGONEGROUP01"  # this module's own (20 characters: a shorter key is not read as a key at all)


@pytest.fixture
def port(stack: Stack) -> AutoscalingActions:
    """The sweeper's Auto Scaling port on the sweeper function's role as the template grants it with
    ManagedByTag=true; the group, tagged for the stack, deleted with ForceDelete."""
    install()
    boto3.client("ec2").create_launch_template(
        LaunchTemplateName="nodes",
        LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "m6g.large"},
    )
    autoscaling = boto3.client("autoscaling")
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=GROUP,
        LaunchTemplate={"LaunchTemplateName": "nodes"},
        MinSize=0,
        MaxSize=1,
        AvailabilityZones=["eu-west-1a"],
        Tags=[{"Key": "nodecycle:owner", "Value": "nodecycle", "PropagateAtLaunch": True}],
    )
    autoscaling.delete_auto_scaling_group(AutoScalingGroupName=GROUP, ForceDelete=True)
    template = load_template(ROOT / "template.yaml")
    role = offline_roles(template, {"ClusterName": "prod", "ManagedByTag": "true"})["SweeperFunctionRole"]
    IDENTITIES.register(
        roles=[role],
        keys=[{"access_key": KEY, "role_arn": role["arn"], "session_name": "sweeper", "account": ACCOUNT}],
    )
    return AutoscalingActions(
        boto3.client("autoscaling", aws_access_key_id=KEY, aws_secret_access_key="sweeper"),
        boto3.client("ec2", aws_access_key_id=KEY, aws_secret_access_key="sweeper"),
    )


def _drain(now: datetime, **changes: Any) -> LifecycleRecord:
    """A confirmed drain of the deleted group's instance at its eviction, its heartbeat due before the next sweep."""
    started = now - timedelta(minutes=20)
    return LifecycleRecord(
        id=f"{INSTANCE}/terminate/{TOKEN}",
        owner="nodecycle",
        instance_id=INSTANCE,
        transition=Transition.TERMINATING,
        token=TOKEN,
        group=GROUP,
        hook="nodecycle-terminate",
        plan=(Step.ACQUIRE_SLOT, Step.CORDON, Step.EVICT, Step.COMPLETE, Step.CLEANUP, Step.DONE),
        step=Step.EVICT,
        seq=9,
        received_at=started,
        started_at=started,
        updated_at=now - timedelta(minutes=1),
        due_at=now + timedelta(minutes=10),
        heartbeat_timeout=300,
        heartbeat_deadline=now + timedelta(seconds=200),
        global_deadline=global_deadline(started, 300),
        verified_at=started,
        node="ip-10-0-1-23.eu-west-1.compute.internal",
    ).model_copy(update=changes)


@pytest.mark.parametrize(
    ("near_its_global_timeout", "outcome"),
    [(False, "action-expired"), (True, "settled-by-sweeper")],
    ids=["kept-alive", "settled-near-its-global-timeout"],
)
def test_a_deleted_groups_lifecycle_is_settled_at_one_sweep_not_failed_at_every_sweep(
    port: AutoscalingActions, near_its_global_timeout: bool, outcome: str
) -> None:
    # Given a drain of the deleted group's instance whose heartbeat is due before the next sweep (or at the last
    # sweep before its global timeout: settled with the failure result)
    now = datetime.now(UTC)
    record = _drain(now)
    if near_its_global_timeout:
        started = now - timedelta(seconds=300 * 100 - 120)
        record = _drain(
            now, started_at=started, received_at=started, global_deadline=global_deadline(started, 300)
        )
    records, metrics, clock = InMemoryRecords(), FakeMetrics(), FakeClock(now)
    assert records.create(record)
    repair = LifecycleRepair(
        records=records,
        dispatcher=Dispatcher(records=records, queues=RecordingQueues(), clock=clock, metrics=metrics),
        autoscaling=port,
        completion=CompleteAction(port, metrics, records),
        metrics=metrics,
        resume_grace=timedelta(minutes=1),
        margin=timedelta(minutes=1),
        interval=timedelta(minutes=5),
        settle_before=timedelta(minutes=7),
        lateness=timedelta(seconds=60),  # (the schedule's minute, as settings reckon it)
        failure_result=lambda _: ActionResult.CONTINUE,
        clock=clock,
    )

    # When the sweep repairs it (its heartbeat, or its completion, refused by IAM: the group has no tag left)
    repair([record], now, AMPLE)

    # Then the sweep does not fail, and the lifecycle is past its action, told once
    after = records.get(record.id)
    assert after is not None
    assert after.seq > record.seq
    assert after.outcome == outcome
    assert "HeartbeatRetries[reason=refused]" not in metrics.counts
    paged = {name: n for name, n in metrics.counts.items() if name not in GAUGES}
    # And the next sweep (its cleanup's message not run yet: the record overdue) pages nothing again, nor fails
    clock.advance(300)
    repair([after], clock.now(), AMPLE)
    assert {name: metrics.counts[name] for name in paged} == paged


GAUGES = ("LifecyclesStuck", "LifecyclesStalled")  # (how many are so at each sweep, not events)
