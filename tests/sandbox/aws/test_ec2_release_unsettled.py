"""EC2 that lags (aws/ec2_consistency.py) refuses a lagging caller's ReleaseAddress of an address disassociated
within the window (``InvalidIPAddress.InUse``: the disassociation not settled yet), as EC2 does under load; moto
released it at once, so no release in the sandbox ever met that refusal after its own disassociation."""

from __future__ import annotations

from typing import Any

from nodecycle_sandbox.aws.ec2_consistency import LAG
from tests.sandbox.aws.test_ec2_consistency import WINDOW, Clock, clock, code, fn, instance, listed, operator

__all__ = ["clock", "fn", "operator"]  # (the fixtures)


def test_an_address_disassociated_within_the_window_is_in_use_to_a_lagging_release(
    clock: Clock, fn: Any, operator: Any
) -> None:
    # Given an address associated before the window, then disassociated by the lagging caller
    allocation = operator.allocate_address(Domain="vpc")["AllocationId"]
    association = operator.associate_address(AllocationId=allocation, InstanceId=instance(operator))
    clock.now += 2 * WINDOW
    fn.disassociate_address(AssociationId=association["AssociationId"])

    # Then its release is refused as in use within the window, and goes through once the window is over
    assert code(fn.release_address, AllocationId=allocation) == "InvalidIPAddress.InUse"
    assert allocation in listed(operator)
    assert LAG.lagged[-1] == f"release_address {allocation}"
    clock.now += WINDOW + 0.1
    fn.release_address(AllocationId=allocation)
    assert allocation not in listed(operator)


def test_an_address_never_associated_within_the_window_is_released_at_once(
    clock: Clock, fn: Any, operator: Any
) -> None:
    allocation = fn.allocate_address(Domain="vpc")["AllocationId"]
    clock.now += WINDOW + 0.1

    fn.release_address(AllocationId=allocation)

    assert allocation not in listed(operator)
