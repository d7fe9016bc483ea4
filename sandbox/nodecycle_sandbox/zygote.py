"""Processes started warm: forked from an interpreter that has already imported the heavy libraries.

A Lambda container of the sandbox (a worker) started as a fresh ``python -m`` spends about a second of CPU
importing boto3, the Kubernetes client, pydantic and powertools before it imports nodecycle; the AWS process
spends as long importing moto. A sandbox starts a dozen of them, the test suite several hundred, on two cores.
A zygote is one fresh interpreter per set of libraries: it imports them once, then forks a child for each
start. The child becomes what ``python -m MODULE ARGS`` would have been: the environment, working directory and
file descriptors it is given, its module run as ``__main__``, a normal interpreter exit (atexit, so coverage
saves its data). Only third-party libraries (and sandbox modules that import no nodecycle code) are preloaded:
nodecycle and the handler are imported by the child itself, from the layer on its own path; and a layer that
ships its own copy of a preloaded library is started cold (`Zygote.preloads`), since the copy in the zygote
would shadow it.

The zygote answers each start with the child's pid and a pidfd: the child is the zygote's, not the caller's,
and the pidfd is how the caller waits for it and kills it (Linux 5.3 or later).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# What a Lambda container of nodecycle imports before its own code (measured: about 0.6 of its 1.0 CPU-s of
# imports), and botocore's data parsed once (runner/botocore_models.py: 0.1 CPU-s of each container's first
# clients). Not the X-Ray SDK: it decides at import whether it runs in Lambda, from the environment.
WORKER_PRELOAD = (
    "boto3",
    "botocore.session",
    "botocore.client",
    "kubernetes.client",
    "pydantic",
    "pydantic.main",
    "aws_lambda_powertools",
    "requests",
    "yaml",
    "nodecycle_sandbox.runner.worker",
    "nodecycle_sandbox.runner.botocore_warm",
)
# What the AWS process imports: moto's backends and the emulation (which import no nodecycle code), and moto's
# first request to each service made once (warm.py).
AWS_PRELOAD = ("nodecycle_sandbox.aws.process", "nodecycle_sandbox.aws.server", "nodecycle_sandbox.aws.warm")

_MAX_FDS = 8
_COVERAGE = ("COVERAGE_PROCESS_START", "COVERAGE_PROCESS_CONFIG")


class Child:
    """A process the zygote forked for us: ``subprocess.Popen``'s poll, wait and kill, by its pidfd. Its exit
    status belongs to the zygote (its parent): ``returncode`` is -SIGKILL if we killed it, else None."""

    def __init__(self, pid: int, pidfd: int) -> None:
        self.pid = pid
        self._pidfd = pidfd
        self._exited = False
        self.returncode: int | None = None

    def poll(self) -> int | None:
        self._wait(0)
        return self.returncode if self._exited else None

    def wait(self, timeout: float | None = None) -> int | None:
        if not self._wait(timeout):
            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0)
        return self.returncode

    def kill(self) -> None:
        if not self._exited:
            with contextlib.suppress(ProcessLookupError, OSError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
                self.returncode = -signal.SIGKILL

    def _wait(self, timeout: float | None) -> bool:
        if not self._exited:
            ready, _, _ = select.select([self._pidfd], [], [], timeout)
            if ready:
                self._exited = True
                os.close(self._pidfd)
        return self._exited


class Zygote:
    """One warm interpreter with ``preload`` imported; `start` forks a child of it. Thread-safe."""

    def __init__(self, preload: Sequence[str]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # The zygote does not measure coverage itself: each child starts its own, as a fresh interpreter would.
        environment = {k: v for k, v in os.environ.items() if k not in _COVERAGE}
        self._process = subprocess.Popen(
            [sys.executable, "-m", "nodecycle_sandbox.zygote", str(theirs.fileno()), *preload],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            env=environment,
        )
        theirs.close()
        self._socket = ours
        self._lock = threading.Lock()
        hello = json.loads(self._socket.recv(1 << 16))
        if "error" in hello:
            raise RuntimeError(f"the zygote could not preload: {hello['error']}")
        # The top-level packages now in the zygote, outside the standard library.
        self.preloads: frozenset[str] = frozenset(hello["packages"])

    def start(
        self,
        module: str,
        args: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path | str,
        fds: Mapping[int, int],
        title: str = "",
    ) -> Child:
        """``python -m module *args`` with exactly ``env``, in ``cwd``; ``fds`` maps each descriptor number the
        child gets (0, 1, 2, ...) to ours that it is a copy of. Nothing else of ours is inherited. A fork keeps
        the zygote's command line: ``title`` (15 characters at most) names the child in /proc/<pid>/comm."""
        request = json.dumps(
            {
                "module": module,
                "args": list(args),
                "env": dict(env),
                "cwd": str(cwd),
                "targets": list(fds),
                "title": title,
            }
        ).encode()
        with self._lock:
            socket.send_fds(self._socket, [request], list(fds.values()))
            reply, received, _, _ = socket.recv_fds(self._socket, 1 << 16, 1)
        if not reply:
            raise RuntimeError("the zygote exited")
        answer = json.loads(reply)
        if "error" in answer:
            raise RuntimeError(f"the zygote could not start {module}: {answer['error']}")
        return Child(answer["pid"], received[0])

    def close(self) -> None:
        self._socket.close()  # the zygote exits when it reads the end of its socket
        try:
            self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


_zygotes: dict[tuple[str, ...], Zygote] = {}
_zygotes_lock = threading.Lock()


def zygote(preload: Sequence[str]) -> Zygote:
    """This process's zygote for ``preload``, started on first use and stopped at exit."""
    key = tuple(preload)
    with _zygotes_lock:
        found = _zygotes.get(key)
        if found is None or found._process.poll() is not None:
            found = _zygotes[key] = Zygote(key)
            atexit.register(found.close)
        return found


# -- the zygote's side ------------------------------------------------------------------------------


def _serve(server: socket.socket) -> dict[str, Any] | None:
    """Answer start requests until the caller goes away (None); in each forked child, return its request."""
    blocked = {signal.SIGCHLD}
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(server, 1 << 16, _MAX_FDS)
        except InterruptedError:
            continue
        if not message:
            return None
        request = json.loads(message)
        pid = -1
        # SIGCHLD stays blocked from the fork until the pidfd is open: the child, even one that exits at once,
        # cannot be reaped (its pid freed) before then.
        signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
        try:
            pid = os.fork()
            if pid == 0:
                server.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)
                request["fds"] = fds
                return dict(request)
            try:
                pidfd = os.pidfd_open(pid)
            except OSError as error:
                server.send(json.dumps({"error": str(error)}).encode())
                continue
        finally:
            if pid != 0:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)
                for fd in fds:
                    os.close(fd)
        socket.send_fds(server, [json.dumps({"pid": pid}).encode()], [pidfd])
        os.close(pidfd)


def _reap(_signum: int, _frame: Any) -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def _become(request: dict[str, Any]) -> None:
    """In the forked child: take the given descriptors, environment and directory, then run the module."""
    fds: list[int] = request["fds"]
    # First out of the way of the target numbers (a received descriptor may already sit on one), then onto them.
    spare = [_high(fd) for fd in fds]
    for fd in fds:
        os.close(fd)
    for target, fd in zip(request["targets"], spare, strict=True):
        os.dup2(fd, target)
    for fd in spare:
        os.close(fd)
    if request["title"]:
        with contextlib.suppress(OSError):
            Path("/proc/self/comm").write_text(request["title"][:15])
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.path[0] = request["cwd"]  # what `python -m` puts first
    if any(name in os.environ for name in _COVERAGE):
        import coverage  # as its .pth file does in a fresh interpreter

        coverage.process_startup(slug="pth")
    sys.argv = [request["module"], *request["args"]]
    sys.modules.pop(
        request["module"], None
    )  # run afresh as __main__, as `python -m` would (runpy warns otherwise)
    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)


def _high(fd: int) -> int:
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 100)


def main(argv: list[str]) -> None:
    server = socket.socket(fileno=int(argv[0]))
    before = set(sys.modules)
    try:
        for name in argv[1:]:
            importlib.import_module(name)
        if (
            threading.active_count() > 1
        ):  # a fork copies only the forking thread: the others' locks would hang
            raise RuntimeError(f"importing {argv[1:]} started threads")
    except Exception as error:
        server.send(json.dumps({"error": f"{type(error).__name__}: {error}"}).encode())
        return
    packages = {name.split(".")[0] for name in set(sys.modules) - before} - set(sys.stdlib_module_names)
    server.send(json.dumps({"packages": sorted(packages)}).encode())
    signal.signal(signal.SIGCHLD, _reap)
    request = _serve(server)
    if request is not None:
        _become(request)


if __name__ == "__main__":
    main(sys.argv[1:])
