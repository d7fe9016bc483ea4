"""Two ways to run a handler: in warm worker processes (as Lambda does) or inline (for fast tests)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

import boto3

from nodecycle_sandbox import zygote
from nodecycle_sandbox.runner import api_calls
from nodecycle_sandbox.runner.context import LambdaContext
from nodecycle_sandbox.runner.faults import RunnerFaults
from nodecycle_sandbox.runner.functions import FunctionSpec
from nodecycle_sandbox.runner.handlers import Handler, call_handler, error_outcome, load_handler

# Lambda gives a cold start 10 s of init, then retries the init within the invocation, under the function's
# timeout: a container may take up to that long to start. Never less than 30 s here (a loaded machine).
LAMBDA_INIT_SECONDS = 10.0
MIN_INIT_TIMEOUT = 30.0
# Variables of the runner's own environment a worker still needs to start Python at all.
_PASSTHROUGH = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "COVERAGE_PROCESS_START")
_WORKER_MODULE = "nodecycle_sandbox.runner.worker"


def _warm_zygote(spec: FunctionSpec) -> zygote.Zygote | None:
    """The zygote to fork this function's containers from; None to start them cold, when its layer ships its
    own copy of a library the zygote preloaded (that copy is what the container must import)."""
    warm = zygote.zygote(zygote.WORKER_PRELOAD)
    shipped = {
        entry.name.removesuffix(".py")
        for layer in spec.layer_dirs
        if layer.is_dir()
        for entry in layer.iterdir()
    }
    return None if shipped & warm.preloads else warm


@dataclass
class InvocationResult:
    request_id: str
    ok: bool
    started_at: float
    finished_at: float
    response: Any = None
    error_type: str | None = None
    error_message: str | None = None
    api_calls: dict[str, int] = field(default_factory=dict)
    cold_start: bool = False
    # The handler could not be loaded (an import error): Lambda's Runtime.ImportModuleError / init error.
    init_error: bool = False
    # Refused for the function's reserved concurrency (Lambda's 429): the handler did not run.
    throttled: bool = False

    @property
    def duration(self) -> float:
        return self.finished_at - self.started_at


class Invoker(Protocol):
    def invoke(self, spec: FunctionSpec, event: Any) -> InvocationResult: ...

    def close(self) -> None: ...


def _context(spec: FunctionSpec, request_id: str, started_at: float) -> LambdaContext:
    return LambdaContext(
        function_name=spec.name,
        function_version="$LATEST",
        invoked_function_arn=spec.arn,
        memory_limit_in_mb=spec.memory_mb,
        aws_request_id=request_id,
        log_group_name=spec.log_group,
        log_stream_name=f"sandbox/[$LATEST]{spec.logical_id}",
        deadline=started_at + spec.timeout,
    )


def _result(
    request_id: str, started_at: float, outcome: Mapping[str, Any], cold: bool, *, init_error: bool = False
) -> InvocationResult:
    return InvocationResult(
        request_id=request_id,
        ok=bool(outcome["ok"]),
        started_at=started_at,
        finished_at=time.time(),
        response=outcome.get("response"),
        error_type=outcome.get("errorType"),
        error_message=outcome.get("errorMessage"),
        api_calls=dict(outcome.get("apiCalls") or {}),
        cold_start=cold,
        init_error=init_error,
    )


def _timed_out(spec: FunctionSpec) -> dict[str, Any]:
    return {
        "ok": False,
        "errorType": "Sandbox.Timedout",
        "errorMessage": f"Task timed out after {spec.timeout:.2f} seconds",
    }


# -- inline -------------------------------------------------------------------------------------


class InlineInvoker:
    """Handlers run in this process, one invocation at a time across all functions (deterministic).

    Each invocation sees its function's environment in `os.environ`; it is restored afterwards. A handler
    cannot be interrupted in-process, so one that overruns its timeout is reported as timed out after it
    returns, as Lambda would have reported it.
    """

    def __init__(self, environments: Mapping[str, Mapping[str, str]]) -> None:
        self._environments = environments
        self._handlers: dict[str, Handler] = {}
        self._sessions: dict[str, boto3.session.Session] = {}
        self._lock = threading.Lock()

    def invoke(self, spec: FunctionSpec, event: Any) -> InvocationResult:
        request_id = str(uuid.uuid4())
        with (
            self._lock,
            _environ(self._environments[spec.logical_id]),
            self._default_session(spec.logical_id),
        ):
            started_at = time.time()
            cold = spec.logical_id not in self._handlers
            if cold:
                for layer in spec.layer_dirs:
                    if str(layer) not in sys.path:
                        sys.path.insert(0, str(layer))
                try:
                    self._handlers[spec.logical_id] = load_handler(
                        spec.handler_file, spec.module_name, spec.handler_name
                    )
                except Exception as error:
                    return _result(request_id, started_at, error_outcome(error), cold, init_error=True)
            context = _context(spec, request_id, started_at)
            with api_calls.counting() as calls:
                outcome = call_handler(self._handlers[spec.logical_id], event, context)
            if time.time() - started_at > spec.timeout:
                outcome = _timed_out(spec)
            return _result(request_id, started_at, {**outcome, "apiCalls": dict(calls)}, cold)

    @contextmanager
    def _default_session(self, logical_id: str) -> Iterator[None]:
        """boto3's default session of the function during its invocation: on Lambda each function's containers
        resolve their own role's credentials, where one process's default session keeps those it resolved first
        (the first function run here), and every function's calls would be signed as that function's role."""
        before = boto3.DEFAULT_SESSION
        # made in the function's environment: its credentials, region and endpoint
        boto3.DEFAULT_SESSION = self._sessions.setdefault(logical_id, boto3.session.Session())
        try:
            yield
        finally:
            boto3.DEFAULT_SESSION = before

    def close(self) -> None:
        for spec_module in [name for name in sys.modules if name.startswith("nodecycle_sandbox_fn_")]:
            del sys.modules[spec_module]


@contextmanager
def _environ(variables: Mapping[str, str]) -> Iterator[None]:
    """The function's ``variables`` in ``os.environ`` for the invocation, and only they put back after it: the
    invocation runs on a runner thread while the process goes on setting its own (pytest's PYTEST_CURRENT_TEST at
    each phase of a test), which a copy of the whole environment written back would undo."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# -- worker processes ---------------------------------------------------------------------------


class WorkerGone(Exception):
    """The worker process died or had to be killed; its container is discarded."""


class _Worker:
    def __init__(self, spec: FunctionSpec, environment: Mapping[str, str], log: IO[bytes] | None) -> None:
        passthrough = {k: os.environ[k] for k in _PASSTHROUGH if k in os.environ}
        args = [
            str(spec.handler_file),
            spec.module_name,
            spec.handler_name,
            *(str(d) for d in spec.layer_dirs),
        ]
        warm = _warm_zygote(spec)
        self._process: subprocess.Popen[bytes] | zygote.Child
        if warm is None:
            self._process = subprocess.Popen(
                [sys.executable, "-m", _WORKER_MODULE, *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env={**passthrough, **environment},
                cwd=spec.code_dir,
            )
            assert self._process.stdin is not None
            assert self._process.stdout is not None
            self._requests: IO[bytes] = self._process.stdin
            self._replies: IO[bytes] = self._process.stdout
        else:
            requests_in, requests_out = os.pipe()
            replies_in, replies_out = os.pipe()
            try:
                self._process = warm.start(
                    _WORKER_MODULE,
                    args,
                    env={**passthrough, **environment},
                    cwd=spec.code_dir,
                    fds={0: requests_in, 1: replies_out, 2: log.fileno() if log is not None else 2},
                    title=f"fn:{spec.code_dir.name}",
                )
            except BaseException:
                for fd in (requests_out, replies_in):
                    os.close(fd)
                raise
            finally:
                for fd in (requests_in, replies_out):
                    os.close(fd)
            self._requests = os.fdopen(requests_out, "wb")
            self._replies = os.fdopen(replies_in, "rb")
        self.init_error: dict[str, Any] | None = None
        hello = self._read(max(MIN_INIT_TIMEOUT, LAMBDA_INIT_SECONDS + spec.timeout))
        if "init_error" in hello:
            self.init_error = hello["init_error"]

    def invoke(
        self, event: Any, context: LambdaContext, timeout: float, faults: Mapping[str, float] | None = None
    ) -> dict[str, Any]:
        request = {"event": event, "context": asdict(context), "faults": dict(faults or {})}
        try:
            self._requests.write(json.dumps(request).encode() + b"\n")
            self._requests.flush()
        except (BrokenPipeError, OSError) as error:
            raise WorkerGone(f"worker exited: {error}") from error
        reply = self._read(timeout)
        return reply

    def _read(self, timeout: float) -> dict[str, Any]:
        ready, _, _ = select.select([self._replies], [], [], timeout)
        if not ready:
            self.kill()
            raise TimeoutError
        line = self._replies.readline()
        if not line:
            self.kill()
            self._process.wait()
            raise WorkerGone("worker exited")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def kill(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait()
        # A request still buffered for a process that died cannot be flushed: closing must not fail on it.
        with contextlib.suppress(OSError):
            self._requests.close()
        self._replies.close()

    def hang_up(self) -> None:
        """Close its requests: the worker's loop ends, and it exits."""
        # A worker that already exited has nothing left to be told.
        with contextlib.suppress(BrokenPipeError):
            self._requests.close()

    def reap(self, deadline: float) -> None:
        """Wait for it to exit until ``deadline`` (time.monotonic()), then kill it."""
        try:
            self._process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._replies.close()


def _stop(workers: list[_Worker]) -> None:
    """Stop workers all at once: an interpreter takes a few tenths of a second to exit, and a sandbox stops a
    dozen (one after the other, about 3 s of every test's teardown)."""
    for worker in workers:
        worker.hang_up()
    deadline = time.monotonic() + 5
    for worker in workers:
        worker.reap(deadline)


class _Pool:
    """Warm workers of one function, started on demand up to `size` (the function's concurrency)."""

    def __init__(self, spec: FunctionSpec, environment: Mapping[str, str], size: int, log: IO[bytes] | None):
        self._spec = spec
        self._environment = environment
        self._size = size
        self._log = log
        self._idle: list[_Worker] = []
        self._count = 0
        self._cond = threading.Condition()

    def acquire(self) -> tuple[_Worker, bool]:
        with self._cond:
            while not self._idle and self._count >= self._size:
                self._cond.wait()
            if self._idle:
                return self._idle.pop(), False
            self._count += 1
        try:
            return _Worker(self._spec, self._environment, self._log), True
        except BaseException:
            self._discard()
            raise

    def warm(self, count: int) -> int:
        """Start workers until ``count`` (at most the pool's size) exist, each idle and warm; returns how
        many were started."""
        started = 0
        while True:
            with self._cond:
                if self._count >= min(count, self._size):
                    return started
                self._count += 1
            try:
                worker = _Worker(self._spec, self._environment, self._log)
            except BaseException:
                self._discard()
                raise
            if worker.init_error is not None:
                self.discard(worker)
                raise RuntimeError(f"{self._spec.logical_id} failed to start: {worker.init_error}")
            self.release(worker)
            started += 1

    def release(self, worker: _Worker) -> None:
        with self._cond:
            self._idle.append(worker)
            self._cond.notify()

    def discard(self, worker: _Worker) -> None:
        try:
            worker.kill()
        finally:
            self._discard()  # whatever killing it raised, its slot goes back to the pool

    def _discard(self) -> None:
        with self._cond:
            self._count -= 1
            self._cond.notify()

    def close(self) -> None:
        _stop(self.take_idle())

    def take_idle(self) -> list[_Worker]:
        """Its idle workers, no longer its: the caller stops them."""
        with self._cond:
            idle, self._idle = self._idle, []
            self._count -= len(idle)
        return idle


class ProcessInvoker:
    """Each function has a pool of worker processes: warm containers that import the handler once.

    A worker that crashes or overruns its timeout is killed and replaced by a cold one on a later
    invocation; the invocation it was running fails (so an SQS batch returns to the queue).
    """

    def __init__(
        self,
        environments: Mapping[str, Mapping[str, str]],
        pool_sizes: Mapping[str, int],
        log_dir: Path | None = None,
        faults: RunnerFaults | None = None,
    ) -> None:
        self._environments = environments
        self._pool_sizes = pool_sizes
        self._faults = faults or RunnerFaults()
        self._log_dir = log_dir
        self._pools: dict[str, _Pool] = {}
        self._logs: list[IO[bytes]] = []
        self._lock = threading.Lock()

    def _pool(self, spec: FunctionSpec) -> _Pool:
        with self._lock:
            if spec.logical_id not in self._pools:
                log = None
                if self._log_dir is not None:
                    self._log_dir.mkdir(parents=True, exist_ok=True)
                    log = (self._log_dir / f"{spec.logical_id}.log").open("ab")
                    self._logs.append(log)
                self._pools[spec.logical_id] = _Pool(
                    spec, self._environments[spec.logical_id], self._pool_sizes.get(spec.logical_id, 1), log
                )
            return self._pools[spec.logical_id]

    def warm(self, spec: FunctionSpec, count: int) -> int:
        """Start ``spec``'s containers ahead of need, up to ``count``: their cold starts are over."""
        return self._pool(spec).warm(count)

    def recycle(self, spec: FunctionSpec) -> None:
        """Stop ``spec``'s idle containers: the next invocations start new ones, with nothing cached."""
        self._pool(spec).close()

    def invoke(self, spec: FunctionSpec, event: Any) -> InvocationResult:
        request_id = str(uuid.uuid4())
        pool = self._pool(spec)
        started_at = time.time()
        try:
            worker, cold = pool.acquire()
        except (TimeoutError, WorkerGone) as error:
            return _result(request_id, started_at, error_outcome(error), True)
        if worker.init_error is not None:
            pool.discard(worker)
            return _result(request_id, started_at, worker.init_error, cold, init_error=True)
        # Lambda's timeout covers the invocation, not the cold start before it.
        invoke_at = time.time()
        try:
            faults = self._faults.directives(spec.logical_id)
            # (an invocation made later than now: its deadline as much later as its clock)
            deadline_from = invoke_at + faults.get("time_travel", 0.0)
            outcome = worker.invoke(event, _context(spec, request_id, deadline_from), spec.timeout, faults)
        except TimeoutError:
            pool.discard(worker)
            return _result(request_id, started_at, _timed_out(spec), cold)
        except WorkerGone as error:
            pool.discard(worker)
            outcome = {"ok": False, "errorType": "Runtime.ExitError", "errorMessage": str(error)}
            return _result(request_id, started_at, outcome, cold)
        pool.release(worker)
        return _result(request_id, started_at, outcome, cold)

    def close(self) -> None:
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        _stop([worker for pool in pools for worker in pool.take_idle()])
        for log in self._logs:
            log.close()
