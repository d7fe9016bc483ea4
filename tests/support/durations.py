"""Each test file's time in the last whole run (``tests/durations.json``, written by ``make durations``), and the
order of the files it gives: the longest first.

``pytest -n N --dist loadfile`` hands the files out in their collected order, each to the next worker that has
two tests or fewer left. Files longest first (the longest-processing-time rule) start the long poles at once and
leave the shortest for the end, where they fill in whichever worker is free, so the workers end together: a
long file handed out late runs alone at the end while the others idle. A file the record does not know (a new
one) is given the median of its folder's files, so it goes out among its neighbours, not first nor last.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

# A new file of slow (end-to-end) tests is not known to be short: at least this long until measured
SLOW_FILE_SECONDS = 60.0
# A new file in a folder the record knows nothing of
UNKNOWN_SECONDS = 1.0


def load(path: Path) -> dict[str, float]:
    """The recorded seconds of each file (its path under tests/), nothing if there is no record yet."""
    try:
        recorded = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    return {str(name): float(seconds) for name, seconds in recorded.items()}


def estimates(
    files: Iterable[str], recorded: Mapping[str, float], slow: Iterable[str] = ()
) -> dict[str, float]:
    """The seconds each of ``files`` is expected to take: recorded, else the median of its folder's recorded
    files (else of its level's), at least SLOW_FILE_SECONDS for a file of slow tests (``slow``)."""
    by_folder: dict[str, list[float]] = defaultdict(list)
    for name, seconds in recorded.items():
        parts = name.split("/")
        for depth in range(1, len(parts)):
            by_folder["/".join(parts[:depth])].append(seconds)
    slow_files = set(slow)
    expected = {}
    for name in files:
        if name in recorded:
            expected[name] = recorded[name]
            continue
        parts = name.split("/")
        folders = ("/".join(parts[:depth]) for depth in range(len(parts) - 1, 0, -1))
        seconds = next(
            (statistics.median(by_folder[f]) for f in folders if by_folder.get(f)), UNKNOWN_SECONDS
        )
        expected[name] = max(seconds, SLOW_FILE_SECONDS) if name in slow_files else seconds
    return expected


class Recorder:
    """Adds up each file's setup, call and teardown times in a run (on the controller: xdist's workers send it
    every report) and writes them into the record at the end, next to the files the run did not take."""

    def __init__(self, path: Path, tests: Path) -> None:
        self.path = path
        self.tests = tests
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid.split("::", 1)[0].removeprefix("tests/")] += report.duration

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED) or not self.seconds:
            return  # (an interrupted run's times are partial)
        merged = {**load(self.path), **self.seconds}
        kept = {name: round(s, 1) for name, s in merged.items() if (self.tests / name).is_file()}
        ordered = dict(sorted(kept.items(), key=lambda item: (-item[1], item[0])))
        self.path.write_text(json.dumps(ordered, indent=1) + "\n")
