"""A launch whose new address EC2 does not know yet (its reads and calls lag: nodecycle_sandbox.aws.ec2_consistency)
while its group terminates the instance (its launch action ended, the instance running in EC2 while the drain hook
holds it): past its minute of tries the launch asks where the instance is and ends as ``instance-gone`` (0079917),
releasing nothing while EC2 says running (5092a4e). The address allocated for it is not leaked: it stays allocated
and unassociated, tagged for the instance, and the sweeper releases it once past its grace (invariant 4), whether or
not a terminate lifecycle of this stack releases it first."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from types import ModuleType

import boto3
import pytest

from nodecycle.domain.model import Step
from nodecycle.domain.ports.addresses import ALLOCATED_AT_TAG, INSTANCE_TAG
from nodecycle.wiring import sweeper
from nodecycle.wiring.eip import address_sweep
from nodecycle_sandbox.aws import LAUNCHING, TERMINATING, AwsControl
from nodecycle_sandbox.aws.ec2_consistency import LAG
from nodecycle_sandbox.aws.group import AutoScalingGroup, GroupSpec, HookSpec, WarmPoolSpec
from tests.conftest import REGION
from tests.functions.eip.conftest import (
    Clock,
    given,
    instance_state,
    lagging_clock,
    now,
    ours,
    run_while,
    work_event,
)
from tests.sandbox.aws.conftest import FakeNodes, RecordingBus
from tests.support.emf import metric
from tests.support.functions import LambdaContext, load_function
from tests.support.stack import Stack
from tests.unit.eip.fakes import launch_record
from tests.unit.sweeper.test_orphans import AMPLE

OWNER = "stack-a"  # tests/conftest.py's stack
FUNCTION_KEY = "AKIAFUNCTIONEIPRIP2T"  # the eip function's: its reads lag
HOOKS = (
    HookSpec("launch", LAUNCHING, heartbeat_timeout=3600, default_result="CONTINUE"),
    HookSpec("drain", TERMINATING, heartbeat_timeout=3600, default_result="CONTINUE"),
)


@pytest.fixture
def clock(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    yield from lagging_clock(FUNCTION_KEY, monkeypatch)


@pytest.fixture
def eip_fn(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "allocate")
    monkeypatch.setenv("NODECYCLE_EIP_FAILURE_POLICY", "abandon")
    return load_function("eip")


def group_launching_one(warm: bool) -> tuple[AutoScalingGroup, str]:
    """The group (the sandbox's lifecycle emulation) with one instance held by its launch hook: into the group,
    or (``warm``) into its warm pool."""
    control = AwsControl(region=REGION)
    control.connect(events=RecordingBus(), nodes=FakeNodes())
    group = AutoScalingGroup(
        autoscaling=boto3.client("autoscaling"),
        ec2=boto3.client("ec2"),
        control=control,
        region=REGION,
        name="workers",
    )
    if warm:
        group.create(
            GroupSpec(
                name="workers",
                size=0,
                hooks=HOOKS,
                warm_pool=WarmPoolSpec(min_size=1, max_group_prepared_capacity=1),
            )
        )
        (instance,) = [i for i, state in group.pool_instances().items() if state == "Warmed:Pending:Wait"]
    else:
        group.create(GroupSpec(name="workers", size=0, hooks=HOOKS))
        group.set_desired(1)
        (instance,) = group.in_state("Pending:Wait")
    return group, instance


@pytest.mark.parametrize(
    ("warm", "terminating"), [(False, "Terminating:Wait"), (True, "Warmed:Terminating:Wait")]
)
def test_the_address_of_a_launch_ended_while_its_group_terminates_it_is_kept_then_swept(
    warm: bool,
    terminating: str,
    eip_fn: ModuleType,
    stack: Stack,
    clock: Clock,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a launch held by its hook whose first run allocated its address, EC2 lagging the eip function by two
    # minutes (the address unknown to it as long)
    group, instance = group_launching_one(warm)
    LAG.arm(120.0, [FUNCTION_KEY], clock)
    launch = given(stack, launch_record(instance, at=now()))
    assert eip_fn.handler(work_event(launch), LambdaContext()).get("batchItemFailures") == []
    (address,) = ours()
    assert "InstanceId" not in address

    # When the group terminates the instance (the drain hook holds it running) and the launch runs on
    group.terminate(instance)
    assert {**group.instances(), **group.pool_instances()}[instance] == terminating
    capsys.readouterr()
    ended = run_while(eip_fn, stack, clock, launch, Step.ASSIGN_EIP)

    # Then the launch ends as gone, no failure counted, nothing allocated again, and the address it allocated is
    # kept while EC2 says running: unassociated, tagged for the instance
    assert (ended.step, ended.outcome) == (Step.DONE, "instance-gone")
    out = capsys.readouterr().out
    assert (metric(out, "EipFailures"), metric(out, "EipsAllocated")) == (0, 0)
    assert instance_state(boto3.client("ec2"), instance) == "running"
    (kept,) = ours()
    tags = {tag["Key"]: tag["Value"] for tag in kept.get("Tags", [])}
    assert (kept["AllocationId"], kept.get("InstanceId"), tags[INSTANCE_TAG]) == (
        address["AllocationId"],
        None,
        instance,
    )

    # And the sweeper, once the address is past its grace (as told by its allocation time), releases it, even
    # while the instance still drains: no address of this owner is left unassociated past the grace
    LAG.disarm()
    hour_ago = (datetime.now(UTC) - timedelta(hours=1)).isoformat(timespec="seconds")
    boto3.client("ec2").create_tags(
        Resources=[kept["AllocationId"]], Tags=[{"Key": ALLOCATED_AT_TAG, "Value": hour_ago}]
    )
    report = address_sweep(sweeper.settings(), sweeper.shared())(AMPLE)
    assert report.released == 1
    assert ours() == []
