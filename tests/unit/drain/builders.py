"""Cluster values for the drain's unit tests, and the time a step's run has."""

from __future__ import annotations

from nodecycle.domain.ports.cluster import PodInfo


def pod(name: str = "web-1", **changes: object) -> PodInfo:
    """A ReplicaSet pod with a 300 s grace period; ``changes`` override any field."""
    base = PodInfo(
        namespace="apps",
        name=name,
        uid=f"uid-{name}",
        controller_kind="ReplicaSet",
        mirror=False,
        grace_period=300,
    )
    return base.model_copy(update=changes)


def no_end() -> float | None:
    """The time left of a run without an end (a step's pass is never cut short)."""
    return None
