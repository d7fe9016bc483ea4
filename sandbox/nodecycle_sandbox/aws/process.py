"""The emulated AWS in a process of its own.

moto's request handling, the lifecycle timers and the event-source pollers would otherwise share one GIL
with the Kubernetes server; a busy drain then shows up as sandbox latency. The child process runs moto and
the emulation; two pipes connect it to the parent: controls go in (`RemoteAwsControl`), and lifecycle
events and node registrations come out, to the parent's `EventSink` and `NodeRegistry`.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, cast

from nodecycle_sandbox.aws.control import SANDBOX_ACCOUNT, AwsControl, AwsControls
from nodecycle_sandbox.aws.lifecycle import EventSink
from nodecycle_sandbox.aws.nodes import NodeRegistry
from nodecycle_sandbox.zygote import AWS_PRELOAD, Child, zygote

_log = logging.getLogger(__name__)

# How long a RequestResponse invocation may wait for the parent's runner: Lambda's longest timeout and a margin
_SYNC_INVOKE_SECONDS = 15 * 60 + 30
# The calls of the `AwsControls` protocol: what the parent may ask of the `AwsControl` in the AWS process.
_REMOTE_CALLS = frozenset(name for name in vars(AwsControls) if not name.startswith("_"))


class _Outbox:
    """The child's side of the event pipe: an `EventSink` and a `NodeRegistry` in one. A RequestResponse
    invocation waits for its answer, which the parent sends back on the same pipe (``_read_answers``)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()
        self._answers: dict[int, tuple[threading.Event, list[Any]]] = {}
        self._ids = itertools.count()
        threading.Thread(target=self._read_answers, name="aws-answers", daemon=True).start()

    def _read_answers(self) -> None:
        while True:
            try:
                _, call, value = self._conn.recv()
            except (EOFError, OSError):
                return
            waiting = self._answers.pop(call, None)
            if waiting is not None:
                waiting[1].append(value)
                waiting[0].set()

    def _send(self, message: tuple[Any, ...]) -> None:
        with self._lock:
            self._conn.send(message)

    def publish(self, event: dict[str, Any]) -> None:
        self._send(("publish", event))

    def invoke(self, function: str, event: Any) -> bool:
        """An Event invocation of ``function`` (``aws/lambda_invoke.py``), for the parent's runner: taken."""
        self._send(("invoke", function, event))
        return True

    def invoke_sync(self, function: str, event: Any) -> dict[str, Any] | None:
        """A RequestResponse invocation of ``function`` (``aws/lambda_invoke.py``), run by the parent's runner: its
        answer, once it has run (None: not a function of the sandbox's, or no answer within a quarter hour,
        Lambda's longest timeout)."""
        call = next(self._ids)
        done, value = self._answers[call] = (threading.Event(), [])
        self._send(("invoke_sync", call, function, event))
        if not done.wait(_SYNC_INVOKE_SECONDS):
            self._answers.pop(call, None)
            return None
        answer: dict[str, Any] | None = value[0]
        return answer

    def add_node(self, name: str, **kwargs: Any) -> None:
        self._send(("add_node", name, kwargs))

    def remove_node(self, name: str) -> None:
        self._send(("remove_node", name, {}))

    def instance_terminated(self, name: str) -> None:
        self._send(("instance_terminated", name, {}))

    def instance_stopped(self, name: str) -> None:
        self._send(("instance_stopped", name, {}))

    def instance_started(self, name: str) -> None:
        self._send(("instance_started", name, {}))

    def instance_resumed(self, name: str) -> None:
        self._send(("instance_resumed", name, {}))

    def instance_rebooting(self, name: str) -> None:
        self._send(("instance_rebooting", name, {}))


def _serve(region: str, account: str, controls: Connection, outbox: Connection) -> None:
    from nodecycle_sandbox.aws.server import MotoServer

    server = MotoServer()
    url = server.start()
    control = AwsControl(region=region, account=account)
    sink = _Outbox(outbox)
    control.connect(events=sink, nodes=sink)
    controls.send(url)
    try:
        while True:
            try:
                request = controls.recv()
            except EOFError:
                break
            if request is None:
                break
            name, args, kwargs = request
            try:
                if name not in _REMOTE_CALLS:
                    raise AttributeError(f"{name} is not a remote control call")
                controls.send(("ok", getattr(control, name)(*args, **kwargs)))
            except Exception as error:  # the parent re-raises it; the child must keep serving
                controls.send(("error", f"{type(error).__name__}: {error}"))
    finally:
        control.close()
        server.stop()
        outbox.close()


class RemoteControlError(RuntimeError):
    """A control call failed inside the AWS process."""


class RemoteAwsControl:
    """`AwsControls` over the pipe into the AWS process: each call is forwarded by name, with its arguments,
    to the `AwsControl` in there, so a new control needs no second copy here."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name not in _REMOTE_CALLS:
            raise AttributeError(f"{name} is not a remote control call")
        return functools.partial(self._call, name)

    def _call(self, call: str, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            self._conn.send((call, args, kwargs))
            status, value = self._conn.recv()
        if status == "error":
            raise RemoteControlError(value)
        return value


class AwsProcess:
    """Starts and stops the AWS process and relays what comes out of it."""

    def __init__(
        self,
        *,
        region: str,
        account: str = SANDBOX_ACCOUNT,
        events: EventSink | None = None,
        nodes: NodeRegistry | None = None,
    ) -> None:
        self._region = region
        self._account = account
        self._events = events
        self._nodes = nodes
        self._process: Child | None = None
        self._controls: Connection | None = None
        self._relay: threading.Thread | None = None
        self._answers_lock = threading.Lock()  # (answers of RequestResponse invocations, from their threads)
        self.url = ""
        self.control: AwsControls | None = None

    def start(self, timeout: float = 60) -> str:
        # Forked from a zygote that has imported moto (see `zygote`), not by multiprocessing (spawn re-runs the
        # parent's __main__; fork would copy the parent's threads' locks). The child gets its ends of two socket
        # pairs as descriptors 3 and 4, and our standard output and error.
        controls, child_controls = socket.socketpair()
        outbox, child_outbox = socket.socketpair()
        self._process = zygote(AWS_PRELOAD).start(
            "nodecycle_sandbox.aws.process",
            ["3", "4", self._region, self._account],
            env=os.environ,
            cwd=os.getcwd(),
            fds={1: 1, 2: 2, 3: child_controls.fileno(), 4: child_outbox.fileno()},
            title="aws",
        )
        child_controls.close()
        child_outbox.close()
        self._controls = Connection(controls.detach())
        try:
            if not self._controls.poll(timeout):
                raise RuntimeError("the AWS process did not start in time")
            self.url = self._controls.recv()
        except (EOFError, RuntimeError):
            self.stop()
            raise RuntimeError("the AWS process failed to start (see its output above)") from None
        self.control = cast("AwsControls", RemoteAwsControl(self._controls))
        self._relay = threading.Thread(
            target=self._relay_events, args=(Connection(outbox.detach()),), name="aws-relay", daemon=True
        )
        self._relay.start()
        return self.url

    def _relay_events(self, outbox: Connection) -> None:
        while True:
            try:
                message = outbox.recv()
            except (EOFError, OSError):
                return
            try:
                if message[0] == "publish":
                    if self._events is not None:
                        self._events.publish(message[1])
                elif message[0] == "invoke":
                    invoke = getattr(self._events, "invoke", None)
                    if invoke is not None:
                        invoke(message[1], message[2])
                elif message[0] == "invoke_sync":
                    # (on a thread of its own: the relay goes on while the function runs, which may take minutes)
                    threading.Thread(
                        target=self._invoke_sync, args=(outbox, *message[1:]), name="aws-invoke", daemon=True
                    ).start()
                elif self._nodes is not None:
                    _, name, kwargs = message
                    getattr(self._nodes, message[0])(name, **kwargs)
            except Exception:
                # A failing consumer must not cut the pipe: later events would pile up in the child.
                _log.exception("relaying %s from the AWS process failed", message[0])

    def _invoke_sync(self, outbox: Connection, call: int, function: str, event: Any) -> None:
        answer = None
        try:
            invoke = getattr(self._events, "invoke_sync", None)
            answer = None if invoke is None else invoke(function, event)
        except Exception as error:
            # (answered as the function's error, not None: None would hand the call to moto as a function the
            # sandbox does not run, and the caller would read moto's answer instead of this failure)
            _log.exception("the RequestResponse invocation of %s failed", function)
            failure = {
                "errorMessage": f"the sandbox could not run it: {error!r}",
                "errorType": "SandboxError",
            }
            answer = {"payload": None, "error": {**failure, "stackTrace": []}, "throttled": False}
        finally:
            with self._answers_lock, contextlib.suppress(OSError):
                outbox.send(("answer", call, answer))

    def stop(self) -> None:
        if self._controls is not None:
            # The child may already be gone, which is what stop wants anyway.
            with contextlib.suppress(BrokenPipeError, OSError):
                self._controls.send(None)
            self._controls.close()
            self._controls = None
        if self._process is not None:
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
        if self._relay is not None:
            self._relay.join(timeout=5)
            self._relay = None


if __name__ == "__main__":
    _serve(
        region=sys.argv[3],
        account=sys.argv[4],
        controls=Connection(int(sys.argv[1])),
        outbox=Connection(int(sys.argv[2])),
    )
    # Served and stopped: nothing is left to save, and tearing down moto's modules and threads took about a
    # second of every sandbox's stop.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
