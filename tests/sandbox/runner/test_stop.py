"""Stopping a runner: its containers exit as a Lambda container is shut down, at once, their exit handlers run."""

from __future__ import annotations

from pathlib import Path

from .conftest import MakeRunner

TEMPLATE = """
Resources:
  Worker:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/worker/
      Handler: app.handler
      Timeout: 5
"""

# Writes what ran of its process's exit: its exit handlers (coverage saves its data in one), and the teardown of
# its modules (a second of CPU for a container's libraries, which nothing needs).
HANDLER = """
import atexit, os

EXIT_LOG = os.path.join(os.environ["LAMBDA_TASK_ROOT"], "exit.log")


def _note(what, _open=open, _path=EXIT_LOG):  # (bound now: a module being torn down has lost its globals)
    with _open(_path, "a") as log:
        log.write(what + "\\n")


atexit.register(_note, "exit handlers")


class _TornDown:
    def __del__(self, _note=_note):
        _note("modules torn down")


witness = _TornDown()


def handler(event, context):
    return os.getpid()
"""


def test_a_stopped_container_runs_its_exit_handlers_and_skips_tearing_its_modules_down(
    make_runner: MakeRunner, tmp_path: Path
) -> None:
    # Given a container that has handled an invocation
    runner = make_runner(TEMPLATE, {"worker": HANDLER}, mode="process")
    assert runner.invoke("Worker", {}).ok

    # When the runner stops
    runner.stop()

    # Then the container ran its exit handlers, and exited without tearing its modules down
    assert (tmp_path / "functions" / "worker" / "exit.log").read_text().splitlines() == ["exit handlers"]
