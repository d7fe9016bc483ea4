"""A late release settles over two runs (eip/release.py): its first run disassociates the address allocated for the
instance and keeps it; only a later run, RELEASE_DELAY on, releases it if its own look still finds the instance down,
and gives it back if it shows the instance started again (EC2 shows a start late). Between the two runs the address
is unassociated, allocated long ago: the sweeper's rule for such an address (released, sweep.addresses) knows only
a launch's seconds before its association and an instance gone without its release. A sweep that falls between the
two runs (30 s of every 5 min) releases what the second run would have given back to an instance in service.

On moto under EC2 that lags (nodecycle_sandbox.aws.ec2_consistency), as tests/functions/eip/
test_warm_pool_start_under_ec2_lag.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from types import ModuleType
from typing import Any

import boto3
import pytest

from nodecycle.domain.model import Step
from nodecycle.domain.ports.addresses import ALLOCATED_AT_TAG, INSTANCE_TAG, OWNER_TAG
from nodecycle.wiring import sweeper
from nodecycle.wiring.eip import address_sweep
from tests.functions.eip.conftest import (
    Clock,
    addresses,
    allocate,
    current,
    due_now,
    given,
    lagging_clock,
    now,
    run_instances,
    run_while,
    work_event,
)
from tests.support.functions import LambdaContext, load_function
from tests.support.stack import Stack
from tests.unit.eip.fakes import terminate_record
from tests.unit.sweeper.test_orphans import AMPLE

OWNER = "stack-a"  # tests/conftest.py's stack
FUNCTION_KEY = "AKIAFUNCTIONEIPLAG31"  # the eip function's and the sweeper's: their reads lag
LAG_SECONDS = 6.0


@pytest.fixture
def clock(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    yield from lagging_clock(FUNCTION_KEY, monkeypatch, armed=LAG_SECONDS)


@pytest.fixture
def allocating_fn(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "allocate")
    return load_function("eip")


def test_a_sweep_between_the_two_runs_of_a_late_release_leaves_the_address_to_its_second_run(
    allocating_fn: ModuleType, stack: Stack, clock: Clock
) -> None:
    # Given an instance launched long ago with the address allocated for it, stopped into its warm pool by a
    # lifecycle whose action was completed first (near its global timeout), its RELEASE_EIP still to run
    clock.now -= 600
    (instance,) = run_instances(1)
    stamp = (now() - timedelta(minutes=10)).isoformat(timespec="seconds")
    held = allocate(**{OWNER_TAG: OWNER, INSTANCE_TAG: instance, ALLOCATED_AT_TAG: stamp})
    operator: Any = boto3.client("ec2")
    operator.associate_address(AllocationId=held, InstanceId=instance, AllowReassociation=False)
    operator.stop_instances(InstanceIds=[instance])
    clock.now += 600
    time.sleep(
        1.1
    )  # (LaunchTime has whole seconds: the launch's before the completion, the start's after it)
    completed = now()
    time.sleep(1.1)
    release = given(
        stack,
        terminate_record(
            instance,
            at=now() - timedelta(minutes=5),
            step=Step.RELEASE_EIP,
            completed_at=completed,
            outcome="CONTINUE",
        ),
    )

    # When a scale-out takes it out of the warm pool again, the late release's first run comes a second later
    # (EC2's reads still show the instance stopped: it disassociates), the sweeper runs 10 s later (EC2's reads
    # caught up), and then the release's second run
    operator.start_instances(InstanceIds=[instance])
    clock.now += 1
    allocating_fn.handler(work_event(due_now(stack, release)), LambdaContext())
    first = current(stack, release)
    assert first.step is Step.RELEASE_EIP  # (its second run to come)
    clock.now += 10
    report = address_sweep(sweeper.settings(), sweeper.shared())(AMPLE)
    run_while(allocating_fn, stack, clock, release, Step.RELEASE_EIP)

    # Then the instance, in service again, holds its address: the sweep left it to the release's second run,
    # which gave it back
    assert report.released == 0
    assert [(a["AllocationId"], a.get("InstanceId")) for a in addresses(**{f"tag:{OWNER_TAG}": OWNER})] == [
        (held, instance)
    ]
