"""A terminate's release of the address allocated for its instance, on moto under EC2 that lags and whose
ReleaseAddress refuses an address disassociated within the window (``InvalidIPAddress.InUse``: the disassociation not
settled yet; nodecycle_sandbox.aws.ec2_consistency), its reads answered fresh and stale in turn: the fresh read shows
the address unassociated, and EC2 refuses its release all the same. The release asks again until EC2 takes it: the
address is released (none left allocated for the instance, billed), counted once, and the lifecycle goes on to its
completion; nothing is left to the sweeper."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest

from nodecycle.domain.model import Step
from nodecycle_sandbox.aws.ec2_consistency import LAG, alternating
from tests.functions.eip.conftest import (
    Clock,
    addresses,
    given,
    lagging_clock,
    now,
    run_instances,
    run_while,
)
from tests.support.emf import metric
from tests.support.functions import load_function
from tests.support.stack import Stack
from tests.unit.eip.fakes import launch_record, terminate_record

FUNCTION_KEY = "AKIAFUNCTIONEIPSETTL"  # the eip function's: its reads lag
WINDOW = 20.0  # seconds: longer than the release's first waits (3 s, 6 s)


@pytest.fixture
def clock(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    yield from lagging_clock(FUNCTION_KEY, monkeypatch)


@pytest.fixture
def allocate_fn(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "allocate")
    return load_function("eip")


def test_a_release_ec2_refuses_until_the_disassociation_settles_releases_the_address_once(
    allocate_fn: ModuleType, stack: Stack, clock: Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an instance that launched long ago with an address allocated for it
    (instance,) = run_instances(1)
    launched = run_while(
        allocate_fn, stack, clock, given(stack, launch_record(instance, at=now())), Step.ASSIGN_EIP
    )
    assert launched.allocation_id is not None
    LAG.arm(WINDOW, [FUNCTION_KEY], clock, fresh=alternating())
    clock.now += 2 * WINDOW
    capsys.readouterr()

    # When it terminates
    terminate = given(stack, terminate_record(instance, at=now()))
    over = run_while(allocate_fn, stack, clock, terminate, Step.RELEASE_EIP)

    # Then EC2 refused the release at least once, and the address is released once all the same, the lifecycle on
    assert f"release_address {launched.allocation_id}" in LAG.lagged
    assert over.step is not Step.RELEASE_EIP
    assert [a["AllocationId"] for a in addresses()] == []
    out = capsys.readouterr().out
    assert (metric(out, "EipsReleased"), metric(out, "EipFailures")) == (1, 0)
