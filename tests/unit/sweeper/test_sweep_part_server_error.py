"""A part of the sweep that meets a transient server error of the cluster (the API server's 500 "etcdserver: request
timed out" while etcd elects a leader or is overloaded) is told as one warning line naming the part and the error,
and counted (``SweepPartsUnavailable{part}``): no traceback per sweep for what is no bug and passes by itself (the
next sweep tries again); the sweep still fails, the other parts run (nodecycle.domain.sweep.sweeper)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime

import pytest

from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.sweep.sweep_time import SweepTime
from nodecycle.domain.sweep.sweeper import Counts, Sweeper, SweepFailed
from tests.support.fakes import FakeClock, FakeMetrics, InMemoryRecords
from tests.unit.sweeper.test_budget_sweep_faults import World

# What the Kubernetes adapter raises for it (adapters/kube/errors.py kube_errors: a 5xx is a TransientError)
ETCD = "reading ConfigMap nodecycle/nodecycle-budget: HTTP 500 etcdserver: request timed out"
LISTING = "listing the nodes: HTTP 500 etcdserver: request timed out"


def test_a_server_error_of_the_cluster_in_the_budget_part_is_one_warning_naming_the_part_counted_no_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a budget held by a lifecycle, an API server that answers the node listing and the budget ConfigMap's
    # read with a 500 (etcd timing out), and a part after it that the cluster does not concern
    world = World()
    world.lifecycle("n1")
    metrics = FakeMetrics()
    ran: list[str] = []

    def unlisted() -> set[str]:
        raise TransientError(LISTING)

    def unread(*, stale: Callable[[Sequence[object]], object]) -> object:
        stale([])  # (the entries judged: the nodes listed first)
        raise TransientError(ETCD)

    world.budget.sweep = unread  # type: ignore[method-assign,assignment]

    def addresses(open_records: Sequence[LifecycleRecord], now: datetime, time: SweepTime) -> Counts:
        ran.append("addresses")
        return {}

    sweeper = Sweeper(
        owner="stack-a",
        records=InMemoryRecords(),
        clock=FakeClock(),
        metrics=metrics,
        parts={"budget": world.part(node_names=unlisted), "addresses": addresses},
        shares={},
    )

    # When the sweep runs
    with caplog.at_level(logging.INFO), pytest.raises(SweepFailed, match="budget"):
        sweeper.sweep(time_left=lambda: 300)

    # Then the other part ran
    assert ran == ["addresses"]
    # And no traceback is logged, no error either: a warning names the part and the server's words, once
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    told = [r.getMessage() for r in caplog.records if "sweep part budget" in r.getMessage()]
    assert len(told) == 1, told
    assert "etcdserver: request timed out" in told[0]
    # And it is counted for the part
    assert metrics.counts["SweepPartsUnavailable[part=budget]"] == 1
