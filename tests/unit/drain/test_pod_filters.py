"""Which pods a drain evicts, and their grace periods (no server needed)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.drain.pods import (
    FIRST_LISTED,
    PLACED_AFTER,
    PLACED_AFTER_MARGIN,
    Cordoned,
    drainable,
    first_listed,
    grace_for,
    placed_after,
    relisted,
    remaining,
    to_evict,
    untold,
)
from nodecycle.domain.ports.cluster import NodeInfo, PodInfo
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


# -- pods placed on the node after its cordon -----------------------------------------------------------------------

CORDON = T0  # the unschedulable taint's timeAdded, on the API server's clock
AFTER = CORDON + PLACED_AFTER_MARGIN + timedelta(seconds=1)  # a creation past the margin


def cordoned(node_changes: dict[str, object] | None = None, /, **extra: object) -> Cordoned:
    """The cordon as a poll tells it: the node cordoned at CORDON (``node_changes`` override), the record's
    ``extra``."""
    node = NodeInfo(
        name="n",
        instance_id="i-1",
        zone="z",
        ready=True,
        owner=None,
        in_progress=None,
        resource_version="1",
        unschedulable=True,
        cordoned_at=CORDON,
    )
    return Cordoned.of(node.model_copy(update=node_changes or {}), extra)


def names(pods: list[PodInfo]) -> list[str]:
    return [p.name for p in pods]


def test_a_pod_created_after_the_cordon_is_neither_waited_for_nor_evicted_those_before_it_are() -> None:
    # Given a pod there before the cordon, one created before it and bound after it (Pending when the drain began),
    # one created within the margin after it, and one created past it
    pods = [
        pod("old", created_at=CORDON - timedelta(hours=1)),
        pod("pending", created_at=CORDON - timedelta(seconds=1)),
        pod("close", created_at=CORDON + PLACED_AFTER_MARGIN),
        pod("new", created_at=AFTER),
    ]

    # Then the drain waits for and evicts all but the one placed past the margin, which is told as placed after
    assert names(remaining(pods, cordoned())) == ["old", "pending", "close"]
    assert names(to_evict(pods, cordoned())) == ["old", "pending", "close"]
    assert names(placed_after(pods, cordoned())) == ["new"]


def test_a_statefulset_pod_recreated_with_the_same_name_after_the_cordon_is_a_pod_placed_after_it() -> None:
    # Given web-0 evicted (being deleted), and web-0 again, a new pod (uid, creation) its StatefulSet made past the
    # cordon, back on the node: both listed a moment apart
    going = pod("web-0", uid="uid-a", controller_kind="StatefulSet", created_at=CORDON - timedelta(days=2))
    back = pod("web-0", uid="uid-b", controller_kind="StatefulSet", created_at=AFTER)

    # Then the one being deleted is waited for, the new one is not
    assert [
        p.uid for p in remaining([going.model_copy(update={"deletion_at": AFTER}), back], cordoned())
    ] == ["uid-a"]
    assert [p.uid for p in placed_after([back], cordoned())] == ["uid-b"]


def test_daemonset_and_mirror_pods_are_left_alone_and_never_told_placed_after_the_cordon() -> None:
    pods = [
        pod("logs", controller_kind="DaemonSet", created_at=AFTER),
        pod("mirror", mirror=True, created_at=AFTER),
    ]
    assert remaining(pods, cordoned()) == []
    assert placed_after(pods, cordoned()) == []


@pytest.mark.parametrize(
    "node_changes",
    [
        {
            "cordoned_at": None
        },  # no taint yet (the node lifecycle controller has not acted), or one without a time
        {"unschedulable": False},  # uncordoned, its taint not lifted yet: no cordon
    ],
)
def test_without_a_cordon_time_every_pod_is_waited_for(node_changes: dict[str, object]) -> None:
    pods = [pod("old", created_at=CORDON - timedelta(hours=1)), pod("new", created_at=AFTER)]
    assert names(remaining(pods, cordoned(node_changes))) == ["old", "new"]
    assert placed_after(pods, cordoned(node_changes)) == []


def test_a_pod_whose_creation_is_not_told_is_waited_for() -> None:
    assert names(remaining([pod("new", created_at=None)], cordoned())) == ["new"]


def test_the_pods_on_a_node_cordoned_earlier_by_someone_else_are_the_drains_when_it_first_lists_them() -> (
    None
):
    # Given a node an operator cordoned an hour before the drain, with pods placed there since (they tolerate the
    # cordon), listed at the drain's first poll; then another placed there after that list
    there = [
        pod("ops-1", created_at=CORDON + timedelta(minutes=10)),
        pod("ops-2", created_at=CORDON + timedelta(minutes=50)),
    ]
    extra = first_listed(
        {}, [*there, pod("logs", controller_kind="DaemonSet", created_at=CORDON + timedelta(hours=1))]
    )
    later = pod("ops-3", created_at=CORDON + timedelta(minutes=50, seconds=1))

    # Then the record notes the latest creation among the drainable pods there, and a later list keeps it
    assert extra == {FIRST_LISTED: (CORDON + timedelta(minutes=50)).isoformat()}
    assert first_listed(extra, [later]) == extra
    # and those pods are waited for and evicted, the later one is not
    assert names(remaining([*there, later], cordoned(**extra))) == ["ops-1", "ops-2"]
    assert names(placed_after([*there, later], cordoned(**extra))) == ["ops-3"]


def test_a_first_list_without_pods_notes_that_none_was_there() -> None:
    extra = first_listed({}, [])
    assert extra == {FIRST_LISTED: None}
    assert names(remaining([pod("new", created_at=AFTER)], cordoned(**extra))) == []
    assert relisted({**extra, "polls": 3}) == {"polls": 3}


def test_pods_placed_after_the_cordon_are_told_once_and_only_those_still_there_are_noted() -> None:
    a, b = pod("a", created_at=AFTER), pod("b", created_at=AFTER)
    new, extra = untold([a], {"polls": 1})
    assert (names(new), extra) == (["a"], {"polls": 1, PLACED_AFTER: ["uid-a"]})
    new, extra = untold([a, b], extra)
    assert (names(new), extra[PLACED_AFTER]) == (["b"], ["uid-a", "uid-b"])
    new, extra = untold([b], extra)
    assert (new, extra[PLACED_AFTER]) == ([], ["uid-b"])
    assert untold([], extra) == ([], {"polls": 1})


def test_an_unreadable_first_list_in_the_record_leaves_every_pod_waited_for() -> None:
    assert names(remaining([pod("new", created_at=AFTER)], cordoned(**{FIRST_LISTED: "garbled"}))) == ["new"]
