"""Which pods a drain evicts, and their grace periods (no server needed)."""

from __future__ import annotations

import pytest

from nodecycle.domain.drain.pods import drainable, grace_for, remaining, to_evict
from tests.support.fakes import T0
from tests.unit.drain.builders import pod


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, True),
        ({"controller_kind": "DaemonSet"}, False),
        ({"mirror": True, "controller_kind": "Node"}, False),
        ({"controller_kind": None}, True),  # a bare pod: the node is going away, so it goes too
        ({"controller_kind": "StatefulSet"}, True),
        ({"controller_kind": "Job"}, True),
    ],
)
def test_every_pod_but_daemonset_and_mirror_pods_is_drained(
    changes: dict[str, object], expected: bool
) -> None:
    assert drainable(pod("web-1", **changes)) is expected


def test_terminating_pods_are_waited_for_but_not_evicted_again() -> None:
    pods = [pod("a"), pod("b", deletion_at=T0), pod("ds", controller_kind="DaemonSet")]
    assert [p.name for p in remaining(pods)] == ["a", "b"]
    assert [p.name for p in to_evict(pods)] == ["a"]


@pytest.mark.parametrize(
    ("own", "cap", "grace"), [(30, 120, 30), (600, 120, 120), (None, 120, 30), (0, 120, 0)]
)
def test_a_pod_gets_its_own_grace_period_up_to_the_cap(own: int | None, cap: int, grace: int) -> None:
    assert grace_for(pod(grace_period=own), cap) == grace
