"""A command whose reader stops reading (``nodecycle status --all | head``, ``nodecycle rbac | less`` quit early)
ends quietly, as the shell's own tools do: exit status 141 (128 + SIGPIPE), nothing on stderr. It printed
Python's BrokenPipeError traceback, which reads as a bug of nodecycle's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_command_whose_reader_has_gone_ends_without_a_traceback() -> None:
    # Given a pipe whose reader has already gone (`| head -1` that has read its line)
    read, write = os.pipe()
    os.close(read)
    try:
        # When a command writes its output into it
        result = subprocess.run(
            [sys.executable, "-m", "nodecycle_cli", "rbac"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
            cwd=ROOT,
        )
    finally:
        os.close(write)

    # Then it ends as a shell tool killed by SIGPIPE does, saying nothing
    assert result.stderr == ""
    assert result.returncode == 141
