"""The benchmarks that need no cluster (or only the built artifact): each runs once at its smallest size and prints its rows, so that
none can rot unnoticed.

Benchmarks are not timed tests: their figures are not checked here (``make bench`` prints them against their
targets); only that each one runs to the end and reports every row it promises.
"""

from __future__ import annotations

import pytest

from tests.benchmarks.runs import runs_and_prints

# Each benchmark, and the start of rows it must print.
ROWS = {
    "waiting": ["AWS calls per waiting lifecycle per hour", "heartbeat calls while throttled"],
    "cold": ["cold import of intake", "cold import of drain", "functions that import no Kubernetes client"],
    "contention": ["budget: 8 acquirers at once", "budget: 409 conflicts per acquire"],
}


@pytest.mark.parametrize("benchmark", list(ROWS))
def test_a_benchmark_runs_at_its_smallest_size_and_prints_its_rows(
    benchmark: str, capsys: pytest.CaptureFixture[str]
) -> None:
    runs_and_prints(benchmark, ROWS[benchmark], capsys)
