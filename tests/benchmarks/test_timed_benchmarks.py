"""The paced refreshes and the bursts: each runs once at its smallest size and prints its rows, so that
none can rot unnoticed.

Benchmarks are not timed tests: their figures are not checked here (``make bench`` prints them against their
targets); only that each one runs to the end and reports every row it promises.
"""

from __future__ import annotations

import pytest

from tests.benchmarks.runs import runs_and_prints

# Each benchmark, and the start of rows it must print.
ROWS = {
    # (the refresh's rows: test_storm_benchmark.py, whose storm reuses its run as the quiet one)
    "order": [  # CI's size runs paced only: the refresh covers pace 1
        "refresh 6 nodes, 4/2, pods 2x slower: makespan vs lower bound",
        "worst wait for a slot vs FCFS packing",
        "refresh 6 nodes, 4/2, pods 2x slower: a freed slot idle, max",
        "refresh 6 nodes, 4/2, pods 2x slower: machine CPU busy over the makespan",
    ],
    "bursts": [
        "6 launches at once: last record written",
        "6 terminations at once: last slot decision",
        "slot asks per node vs one each",
        "budget: CPU per ask with",
        "the ConfigMap store vs in memory",
    ],
}


@pytest.mark.parametrize("benchmark", list(ROWS))
def test_a_benchmark_runs_at_its_smallest_size_and_prints_its_rows(
    benchmark: str, capsys: pytest.CaptureFixture[str]
) -> None:
    runs_and_prints(benchmark, ROWS[benchmark], capsys)
