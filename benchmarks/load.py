"""The load the benchmark itself puts on the machine, and the load others put on it.

The sandbox runs everything on one machine: the API server, moto, the runner and every warm handler. When
they need more CPU than the machine has, a waiting node waits for the sandbox, not for nodecycle. This
module samples, from ``/proc`` (Linux), the CPU time of this process and of every process it started
(grouped by role: the API server and runner in this process, the AWS process, each function's workers),
and how busy the machine's CPUs were in all: what was not ours was someone else's. Elsewhere than Linux it
records nothing and says so.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
SAMPLE_SECONDS = 0.25


@dataclass(frozen=True)
class Sample:
    time: float  # time.time()
    machine_busy: float  # CPU-seconds all CPUs spent busy since boot (steal included: the host took them)
    machine_total: float  # CPU-seconds all CPUs existed since boot
    ours: dict[str, float]  # role -> CPU-seconds of our processes of that role, cumulative


@dataclass
class Load:
    """Samples of one measured stretch; figures over any window of it."""

    cores: int
    samples: list[Sample] = field(default_factory=list)

    @property
    def available(self) -> bool:
        return len(self.samples) >= 2

    def window(self, start: float, end: float) -> tuple[Sample, Sample] | None:
        """The samples that enclose [start, end] as closely as the sampling allows."""
        if not self.available:
            return None
        times = [sample.time for sample in self.samples]
        first = max(0, bisect.bisect_right(times, start) - 1)
        last = min(len(self.samples) - 1, bisect.bisect_left(times, end))
        if last <= first:
            last = min(first + 1, len(self.samples) - 1)
        return (self.samples[first], self.samples[last]) if last > first else None

    def machine_busy(self, start: float, end: float) -> float | None:
        """The share of every CPU that was busy over [start, end] (0..1), whoever used it."""
        found = self.window(start, end)
        if found is None:
            return None
        a, b = found
        total = b.machine_total - a.machine_total
        return None if total <= 0 else (b.machine_busy - a.machine_busy) / total

    def ours(self, start: float, end: float) -> dict[str, float]:
        """CPU-seconds our processes used over [start, end], by role."""
        found = self.window(start, end)
        if found is None:
            return {}
        a, b = found
        return {role: b.ours.get(role, 0.0) - a.ours.get(role, 0.0) for role in b.ours}

    def summary(self, start: float, end: float) -> list[str]:
        found = self.window(start, end)
        if found is None:
            return ["sandbox load: not measured (no /proc on this machine)"]
        a, b = found
        wall = b.time - a.time
        ours = self.ours(start, end)
        mine = sum(ours.values())
        busy = self.machine_busy(start, end) or 0.0
        others = max(0.0, busy * self.cores * wall - mine)
        by_role = ", ".join(
            f"{role} {seconds:.1f}" for role, seconds in sorted(ours.items(), key=lambda r: -r[1])
        )
        return [
            f"sandbox load over {wall:.1f} s on {self.cores} cores: the machine was {100 * busy:.0f}% busy; "
            f"the sandbox used {mine:.1f} CPU-s ({100 * mine / (wall * self.cores):.0f}% of the machine), "
            f"everything else {others:.1f} CPU-s ({100 * others / (wall * self.cores):.0f}%)",
            f"sandbox CPU-s by process: {by_role}",
        ]


def _machine() -> tuple[float, float]:
    with open(PROC / "stat") as stream:
        fields = [int(value) for value in stream.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal (guest time is already in user)
    idle = fields[3] + fields[4]
    total = sum(fields[:8])
    return (total - idle) / TICKS, total / TICKS


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        tree.setdefault(parent, []).append(int(entry.name))
    return tree


def _descendants(root: int) -> Iterator[int]:
    tree = _children()
    stack = [root]
    while stack:
        pid = stack.pop()
        yield pid
        stack.extend(tree.get(pid, ()))


def _role(pid: int, root: int) -> str:
    if pid == root:
        return "api server + runner"
    try:
        argv = (PROC / str(pid) / "cmdline").read_bytes().split(b"\0")
        comm = (PROC / str(pid) / "comm").read_text().strip()
    except OSError:
        return "other"
    words = [part.decode(errors="replace") for part in argv if part]
    if "nodecycle_sandbox.zygote" in words:
        # forked from a zygote (nodecycle_sandbox/zygote.py): its command line, our title in comm
        if comm.startswith("fn:"):
            return f"{comm.removeprefix('fn:')} workers"
        return "aws (moto + lifecycle)" if comm == "aws" else "zygotes (the imports, once)"
    if "nodecycle_sandbox.runner.worker" in words:
        handler = words[words.index("nodecycle_sandbox.runner.worker") + 1]
        return f"{Path(handler).parent.name} workers"  # functions/<name>/app.py
    if any("nodecycle_sandbox.aws" in word for word in words):
        return "aws (moto + lifecycle)"
    if words and Path(words[0]).name == "kubectl":
        return "kubectl"
    return "other"


def _cpu_seconds(pid: int) -> float | None:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


class _Sampler:
    # Finding our processes means reading every /proc/<pid>/stat: done every RESCAN samples only (a worker
    # that lives less than that is missed, the sandbox's live for the whole run).
    RESCAN = 8

    def __init__(self, load: Load, every: float) -> None:
        self._load = load
        self._every = every
        self._stop = threading.Event()
        self._root = os.getpid()
        self._pids: dict[int, str] = {}  # pid -> role
        self._last: dict[int, float] = {}  # pid -> CPU-seconds: exited processes keep their last figure
        self._samples = 0
        self._thread = threading.Thread(target=self._run, name="bench-load-sampler", daemon=True)

    def start(self) -> None:
        self._sample()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._samples = 0  # a last full scan
        self._sample()

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self._sample()

    def _sample(self) -> None:
        now = time.time()
        busy, total = _machine()
        if self._samples % self.RESCAN == 0:
            for pid in _descendants(self._root):
                # (a child seen between its fork and its title: looked at again)
                if pid not in self._pids or self._pids[pid].startswith("zygotes"):
                    self._pids[pid] = _role(pid, self._root)
        self._samples += 1
        for pid in self._pids:
            seconds = _cpu_seconds(pid)
            if seconds is not None:
                self._last[pid] = seconds
        ours: dict[str, float] = {}
        for pid, seconds in self._last.items():
            role = self._pids[pid]
            ours[role] = ours.get(role, 0.0) + seconds
        self._load.samples.append(Sample(now, busy, total, ours))


@contextmanager
def sampled(every: float = SAMPLE_SECONDS) -> Iterator[Load]:
    """Sample the load while the block runs; the samples are in the yielded :class:`Load`."""
    load = Load(cores=os.cpu_count() or 1)
    if not (PROC / "stat").exists():
        yield load
        return
    sampler = _Sampler(load, every)
    sampler.start()
    try:
        yield load
    finally:
        sampler.stop()
