"""`start_profile`: the phases of a sandbox's start and stop, measured only when NODECYCLE_SANDBOX_PROFILE names a
file, with the CPU of the processes the test process starts counted too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodecycle_sandbox import start_profile
from nodecycle_sandbox.start_profile import Profile, tree_cpu

_BUSY = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"


def test_nothing_is_measured_or_written_without_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Given no profile file named
    monkeypatch.delenv(start_profile.ENV, raising=False)
    profile = Profile()

    # When a phase runs and the profile is written
    with profile.phase("kube"):
        pass
    profile.write(size=2)

    # Then nothing was measured
    assert profile.phases == []
    assert list(tmp_path.iterdir()) == []


def test_each_phase_counts_the_cpu_of_the_processes_it_started(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Given a profile file named
    out = tmp_path / "starts.jsonl"
    monkeypatch.setenv(start_profile.ENV, str(out))
    profile = Profile()

    # When a phase runs a child process that spins 0.3 s of CPU, and another does nothing
    with profile.phase("aws"):
        subprocess.run([sys.executable, "-c", _BUSY], check=True)
    with profile.phase("stop aws"):
        pass
    profile.write(size=3)

    # Then one line names both phases, the first with the child's CPU (a reaped child's, in our cutime)
    (line,) = out.read_text().splitlines()
    written = json.loads(line)
    assert written["size"] == 3
    phases = {phase["phase"]: phase for phase in written["phases"]}
    assert list(phases) == ["aws", "stop aws"]
    assert phases["aws"]["cpu"] >= 0.25
    assert phases["stop aws"]["cpu"] < 0.25


def _descendants_cpu() -> float:
    """The tree's CPU less this process's own and its reaped children's (the polling below costs some)."""
    return tree_cpu() - sum(os.times()[:4])


def test_the_tree_counts_a_living_childs_children() -> None:
    # Given a child (as the zygote is) that has run a grandchild spinning 0.3 s of CPU, and lives on
    before = _descendants_cpu()
    script = (
        f"import subprocess, sys, time\nsubprocess.run([sys.executable, '-c', {_BUSY!r}])\ntime.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", script])
    try:
        # When the grandchild is done
        deadline = time.monotonic() + 30
        while _descendants_cpu() - before < 0.25 and time.monotonic() < deadline:
            time.sleep(0.1)

        # Then the tree's CPU grew by the grandchild's at least, the child still running
        assert _descendants_cpu() - before >= 0.25
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()
