"""An Elastic IP AWS locked (InvalidAddress.Locked to ReleaseAddress until AWS Support unlocks it) cannot be
released: the product leaves it to the sweeper. The "addresses" judge accepts it left unassociated while it is
locked, and once the world has lifted the lock and run its late sweeps, demands it released."""

from __future__ import annotations

from nodecycle_sandbox.aws.records import InstanceHistory
from nodecycle_sandbox.chaos.invariants import check
from tests.campaign.test_invariants import NODE, T0, _observation

TAGS = {"nodecycle:owner": "chaos-a", "nodecycle:instance-id": "i-1"}
# (i-1 terminated at 12 s: its address, unassociated since, is left after the late sweeps)
GONE = [InstanceHistory("i-1", "g", "eu-west-1a", NODE, T0, T0, T0 + 1, T0 + 12, "scale-in")]


def _leaks(locked: dict[str, tuple[float, float | None]]) -> list[str]:
    observation = _observation(
        [], instances=GONE, actions=[], final_addresses={"a-1": (None, TAGS)}, locked=locked
    )
    return [v.detail for v in check(observation) if v.invariant == "addresses"]


def test_a_locked_address_is_left_to_the_sweeper_while_locked_and_released_once_unlocked() -> None:
    # Given the address of a terminated instance left unassociated after the late sweeps, never locked: leaked
    assert _leaks({}) == ["a-1 (for i-1) unassociated after the sweep grace: leaked"]
    # When AWS locked it at 5 s and it is locked still, Then it is no leak: its release is AWS Support's to allow
    assert _leaks({"a-1": (T0 + 5, None)}) == []
    # But once the lock was lifted (and the late sweeps ran), it is one
    (leak,) = _leaks({"a-1": (T0 + 5, T0 + 40)})
    assert "a-1 (for i-1), locked by AWS 5.0s in, still allocated after its lock was lifted" in leak
    # ...and a lock on another address excuses nothing
    assert _leaks({"a-2": (T0 + 5, None)}) == ["a-1 (for i-1) unassociated after the sweep grace: leaked"]
