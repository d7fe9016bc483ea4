"""A warm Lambda container: one process, one function, invocations one at a time.

Run as `python -m nodecycle_sandbox.runner.worker HANDLER_FILE MODULE HANDLER [LAYER_DIR...]` with the
function's environment. It speaks JSON lines on the stdin/stdout it was started with; the handler's own
stdout goes to stderr, so a `print` or a log line can never corrupt the protocol.
"""

from __future__ import annotations

import atexit
import io
import json
import os
import sys
from pathlib import Path
from typing import IO, Any

from nodecycle_sandbox.runner import api_calls, botocore_models
from nodecycle_sandbox.runner.context import LambdaContext
from nodecycle_sandbox.runner.faults import WorkerFaults
from nodecycle_sandbox.runner.handlers import call_handler, error_outcome, load_handler


def _send(stream: IO[bytes], message: dict[str, Any]) -> None:
    stream.write(json.dumps(message).encode() + b"\n")
    stream.flush()


def _line_stream(fd: int) -> IO[str]:
    """``fd`` as a text stream that writes each line in one write: the function's containers append to one log file
    (``invokers.py``), and a line written in pieces (``print`` writes its text and its newline apart, unbuffered
    under PYTHONUNBUFFERED, or cut at 8 KiB block-buffered) could be broken by another container's line, which
    Lambda, a log stream per container, never does. Each line is in the file when it is written, as in Lambda."""
    binary = io.BufferedWriter(io.FileIO(fd, "w", closefd=False), buffer_size=1 << 20)
    return io.TextIOWrapper(binary, encoding="utf-8", errors="backslashreplace", line_buffering=True)


def main(argv: list[str]) -> int:
    handler_file, module_name, handler_name, *layer_dirs = argv
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(2, 1)
    sys.stdout, sys.stderr = _line_stream(1), _line_stream(2)
    # /opt/python (the layer) and /var/task (the function) come first on Lambda's path.
    sys.path[:0] = [*layer_dirs, str(Path(handler_file).parent)]
    api_calls.install()
    botocore_models.install()
    faults = WorkerFaults()
    faults.install()
    try:
        handler = load_handler(Path(handler_file), module_name, handler_name)
    except BaseException as error:  # an init error fails the invocation and discards the container
        _send(replies, {"init_error": error_outcome(error)})
        return 1
    _send(replies, {"ready": True})
    for line in requests:
        request = json.loads(line)
        context = LambdaContext(**request["context"])
        with faults.applied(request.get("faults") or {}), api_calls.counting(process_wide=True) as calls:
            outcome = call_handler(handler, request["event"], context)
        _send(replies, {**outcome, "apiCalls": dict(calls)})
    return 0


def _exit(code: int) -> None:
    """Exit as Lambda shuts a container down, at once: its exit handlers run (coverage saves its data in one,
    logging flushes in another), but not the interpreter's teardown of the modules, which nothing needs and
    which took about a second of CPU per container (boto3, the Kubernetes client, pydantic, powertools) in
    every sandbox's stop, for a dozen containers."""
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit(main(sys.argv[1:]))
