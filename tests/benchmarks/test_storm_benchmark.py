"""The refresh quiet and in a storm of throttles and conflicts: it runs once at its smallest size and prints its
rows, so that it cannot rot unnoticed. A file of its own: two refreshes, the longest of the benchmarks' smoke
runs, which ``--dist loadfile`` then gives a worker of their own.

Benchmarks are not timed tests: the figures (makespans, calls, idle times) are not checked here (``make bench``
prints them); only that the benchmark runs to the end and reports every row it promises.
"""

from __future__ import annotations

import pytest

from tests.benchmarks.runs import runs_and_prints

ROWS = [
    "storm 3 nodes, 2/1: quiet makespan vs lower bound",
    "storm 3 nodes, 2/1: storm makespan vs quiet",
    "storm 3 nodes, 2/1: AWS calls per lifecycle, storm vs quiet",
    "storm 3 nodes, 2/1: heartbeats per drained node, storm vs quiet",
    "storm 3 nodes, 2/1: K8s requests per drained node, storm vs quiet",
    "storm 3 nodes, 2/1: a freed slot idle, max, storm vs quiet",
    "storm 3 nodes, 2/1: terminate action started -> node in the budget, max",
    "storm 3 nodes, 2/1: rules broken or left over, quiet + storm",
]


def test_the_storm_benchmark_runs_at_its_smallest_size_and_prints_its_rows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    runs_and_prints("storms", ROWS, capsys)
