"""The benchmarks that need no cluster (or only the built artifact): each runs once at its smallest size and prints its rows, so that
none can rot unnoticed.

Benchmarks are not timed tests: their figures are not checked here (``make bench`` prints them against their
targets); only that each one runs to the end and reports every row it promises.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import benchmarks.__main__ as benchmarks_main
from tests.benchmarks.runs import runs_and_prints

# Each benchmark, and the start of rows it must print.
ROWS = {
    "waiting": ["AWS calls per waiting lifecycle per hour", "heartbeat calls while throttled"],
    "cold": [
        "cold import of intake",
        "cold import of drain",
        "cold import of intake + its first invocation's parse",
        "functions that import no Kubernetes client",
    ],
    "contention": ["budget: 8 acquirers at once", "budget: 409 conflicts per acquire"],
}


@pytest.mark.parametrize("benchmark", list(ROWS))
def test_a_benchmark_runs_at_its_smallest_size_and_prints_its_rows(
    benchmark: str, capsys: pytest.CaptureFixture[str]
) -> None:
    runs_and_prints(benchmark, ROWS[benchmark], capsys)


def test_saving_some_benchmarks_from_the_command_line_keeps_the_others_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a saved run with a row of another benchmark
    saved = tmp_path / "last-run.json"
    saved.write_text(json.dumps({"rows": {"another benchmark's row": {"ours": 1.0}}}))
    monkeypatch.setattr(benchmarks_main, "LAST_RUN", saved)

    # When one benchmark is run and saved from the command line (no argv given to main)
    monkeypatch.setattr(sys, "argv", ["python -m benchmarks", "--tiny", "--only", "waiting", "--save"])
    assert benchmarks_main.main() == 0
    capsys.readouterr()

    # Then its rows join the other's, and the command is recorded as it was typed
    after = json.loads(saved.read_text())
    assert "another benchmark's row" in after["rows"]
    assert any(name.startswith("AWS calls per waiting lifecycle") for name in after["rows"])
    assert after["command"] == "python -m benchmarks --tiny --only waiting --save"
