"""Where a sandbox's start and stop go: each phase's wall seconds and CPU seconds, written as one JSON line per
sandbox to the file named by ``NODECYCLE_SANDBOX_PROFILE`` (nothing is measured when it is unset).

The CPU counted is this process's (every thread: other work running meanwhile is counted too) and that of all
its descendants: the zygotes, the AWS process and the Lambda containers they fork (the latter are the zygotes'
children, not ours), including descendants that have exited and been reaped (their parent's ``cutime``).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ENV = "NODECYCLE_SANDBOX_PROFILE"
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_write_lock = threading.Lock()


def enabled() -> bool:
    return bool(os.environ.get(ENV))


def _stat(pid: str) -> tuple[int, float] | None:
    """(parent pid, CPU seconds of the process and its reaped children) of ``/proc/<pid>/stat``."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "
    # fields[1] is the ppid; utime, stime, cutime, cstime are fields 14..17 of the full line (11..14 here).
    return int(fields[1]), sum(int(f) for f in fields[11:15]) / _TICK


def tree_cpu() -> float:
    """CPU seconds used so far by this process, its reaped children and all its living descendants."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            found = _stat(entry)
            if found is not None:
                parents[int(entry)], cpu[int(entry)] = found
    me = os.getpid()
    total = cpu.get(me, 0.0)
    for pid in cpu:
        ancestor = parents.get(pid)
        while ancestor is not None and ancestor not in (me, 0, 1):
            ancestor = parents.get(ancestor)
        if ancestor == me and pid != me:
            total += cpu[pid]
    return total


class Profile:
    """The phases of one sandbox's life, measured in turn; ``write`` appends them to the profile file."""

    def __init__(self) -> None:
        self.on = enabled()
        self.phases: list[dict[str, Any]] = []
        self.test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if not self.on:
            yield
            return
        wall, cpu = time.monotonic(), tree_cpu()
        try:
            yield
        finally:
            self.phases.append(
                {"phase": name, "wall": round(time.monotonic() - wall, 3), "cpu": round(tree_cpu() - cpu, 3)}
            )

    def write(self, **extra: Any) -> None:
        if not self.on or not self.phases:
            return
        line = json.dumps({"pid": os.getpid(), "test": self.test, **extra, "phases": self.phases})
        with _write_lock, open(os.environ[ENV], "a", encoding="utf-8") as out:
            out.write(line + "\n")
        self.phases = []
