"""The cold start benchmark times each function's import with its first invocation's parse
(``benchmarks/cold_start.py``, ``_first_parse``): each statement must still parse what it says it does, or the
figure beside the import alone would time an error instead."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.cold_start import HANDLER, SETTINGS_ENV, _first_parse

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("case", ["intake", "intake-spot", "eip", "drain"])
def test_each_first_parse_reads_its_message_after_the_handlers_import(case: str) -> None:
    # Given the function's handler and the layer's source on the path, and the settings of the benchmark
    function = case.removesuffix("-spot")
    program = (
        "import sys\n"
        f"sys.path[0:0] = [{str(ROOT / 'functions' / function)!r}, {str(ROOT / 'layers')!r}]\n"
        f"{HANDLER}\n{_first_parse()[case]}\nprint('parsed')\n"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "AWS_REGION": "eu-west-1",
        "AWS_DEFAULT_REGION": "eu-west-1",
        "POWERTOOLS_TRACE_DISABLED": "true",
        **SETTINGS_ENV,
    }

    # When a fresh interpreter imports it and runs the statement
    done = subprocess.run(
        [sys.executable, "-I", "-c", program], capture_output=True, text=True, env=env, check=False
    )

    # Then the statement's own checks passed (what it parsed is what it names)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "parsed"
