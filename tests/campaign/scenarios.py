"""Crafted scenarios for the campaign's tests: one small story each test changes a few fields of (its faults, its
seed, how long its nodes linger...), instead of every test spelling out the whole Scenario."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from nodecycle_sandbox.chaos.plan import Scenario
from nodecycle_sandbox.faults import Fault

# One instance of stack a's three terminated and replaced, three pods quick to stop, no lost kubelet, and no sweeps
# but the world's schedule: what a crafted scenario changes is then what its test is about.
ONE_TERMINATE = Scenario(
    seed=0,
    index=0,
    kind="terminate",
    stacks=("a",),
    size=3,
    keep=3,
    terminate=1,
    min_healthy=0,
    replicas=3,
    shutdown=0.3,
    lost_kubelet_at=None,
    sweeps=(),
)


def one_terminate(*faults: Fault, **changes: Any) -> Scenario:
    """ONE_TERMINATE under ``faults``, with ``changes`` (Scenario's fields: seed, node_removal, kind...)."""
    return replace(ONE_TERMINATE, faults=faults, **changes)
