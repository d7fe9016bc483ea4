"""The refresh, then the same refresh in a storm of throttles and conflicts: they run once at their smallest size
and print their rows, so that neither can rot unnoticed. Together: the storm's quiet refresh is the refresh
benchmark's run (the same settings), not a third refresh. A file of its own: two refreshes, the longest of the
benchmarks' smoke runs, which ``--dist loadfile`` then gives a worker of their own.

Benchmarks are not timed tests: the figures (makespans, calls, idle times) are not checked here (``make bench``
prints them); only that the benchmark runs to the end and reports every row it promises.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import refresh, storms
from benchmarks.load import Load
from benchmarks.schedule import Budget
from tests.benchmarks.runs import runs_and_prints

ROWS = [
    "refresh makespan, 3 nodes",
    "refresh 3 nodes, 2/1: some slot free while a node waits, longest stretch",
    "refresh 3 nodes, 2/1: a freed slot idle, max",
    "refresh 3 nodes, 2/1: wake latency, max",
    "storm 3 nodes, 2/1: quiet makespan vs lower bound",
    "storm 3 nodes, 2/1: storm makespan vs quiet",
    "storm 3 nodes, 2/1: AWS calls per lifecycle, storm vs quiet",
    "storm 3 nodes, 2/1: heartbeats per drained node, storm vs quiet",
    "storm 3 nodes, 2/1: K8s requests per drained node, storm vs quiet",
    "storm 3 nodes, 2/1: a freed slot idle, max, storm vs quiet",
    "storm 3 nodes, 2/1: terminate action started -> node in the budget, max",
    "storm 3 nodes, 2/1: rules broken or left over, quiet + storm",
]


def test_the_refresh_and_storm_benchmarks_run_at_their_smallest_size_and_print_their_rows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    runs_and_prints(("refresh", "storms"), ROWS, capsys)


def test_the_storm_takes_no_quiet_refresh_of_other_settings(tmp_path: Path) -> None:
    # Given a quiet refresh run with a budget of 2 in all, 1 per zone
    ran = refresh.Settings(3, Budget(2, 1), retry_seconds=5, poll_seconds=1)
    quiet = refresh.RefreshRun(ran, [], [], {}, {}, 0.0, [], [], Load(cores=2))

    # When the storm is asked to compare itself with it at another budget, Then it refuses, before any sandbox
    other = refresh.Settings(3, Budget(3, 1), retry_seconds=5, poll_seconds=1)
    with pytest.raises(ValueError, match="the quiet refresh given ran with"):
        storms.run(other, tmp_path, quiet)
