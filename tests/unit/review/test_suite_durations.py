"""The suite's own order: files longest first by their recorded times, a new file among its neighbours."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import pytest

from tests.support.durations import SLOW_FILE_SECONDS, UNKNOWN_SECONDS, Recorder, estimates, load

RECORDED = {
    "integration/lifecycle/test_crash.py": 100.0,
    "integration/lifecycle/test_drain.py": 20.0,
    "integration/budget/test_bound.py": 40.0,
    "unit/budget/test_rules.py": 2.0,
    "unit/budget/test_limits.py": 4.0,
}


def test_a_recorded_file_keeps_its_time_and_a_new_one_takes_its_folders_median() -> None:
    files = [
        *RECORDED,
        "integration/lifecycle/test_new.py",
        "unit/budget/test_new.py",
        "unit/eip/test_new.py",
    ]
    expected = estimates(files, RECORDED)
    assert {name: expected[name] for name in RECORDED} == RECORDED
    assert expected["integration/lifecycle/test_new.py"] == 60.0  # (100 + 20) / 2
    assert expected["unit/budget/test_new.py"] == 3.0
    assert expected["unit/eip/test_new.py"] == 3.0  # no file of unit/eip known: unit's


def test_a_new_file_of_slow_tests_goes_out_among_the_long_ones_and_one_of_an_unknown_level_last() -> None:
    expected = estimates(
        ["unit/budget/test_slow.py", "elsewhere/test_x.py"], RECORDED, slow=["unit/budget/test_slow.py"]
    )
    assert expected == {"unit/budget/test_slow.py": SLOW_FILE_SECONDS, "elsewhere/test_x.py": UNKNOWN_SECONDS}


def test_a_run_records_its_files_times_beside_the_others_and_drops_files_gone(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    for name in ("unit/test_a.py", "unit/test_b.py"):
        (tests / name).parent.mkdir(parents=True, exist_ok=True)
        (tests / name).write_text("")
    record = tests / "durations.json"
    record.write_text(json.dumps({"unit/test_a.py": 5.0, "unit/test_b.py": 1.0, "unit/test_gone.py": 9.0}))
    recorder = Recorder(record, tests)
    phases: list[tuple[Literal["setup", "call", "teardown"], float]] = [
        ("setup", 0.5),
        ("call", 2.0),
        ("teardown", 0.3),
    ]
    for when, seconds in phases:
        report = pytest.TestReport(
            "tests/unit/test_b.py::test_x", ("", 0, ""), {}, "passed", None, when, [], seconds
        )
        recorder.pytest_runtest_logreport(report)

    recorder.pytest_sessionfinish(pytest.Session.__new__(pytest.Session), pytest.ExitCode.OK)

    assert load(record) == {"unit/test_b.py": 2.8, "unit/test_a.py": 5.0}
    assert list(json.loads(record.read_text())) == ["unit/test_a.py", "unit/test_b.py"]  # longest first
