"""The functions' logs in CloudWatch Logs, as Lambda ships them, so that the runbook's ``aws logs tail
$(out DrainLogGroupName) --since 30m --filter-pattern ERROR`` (FilterLogEvents) reads them from the sandbox too.

The runner's containers append each function's output to ``<log dir>/<logical id>.log``, one whole line per
write (``worker.py``). Lambda sends what a function writes to its log group (its LoggingConfig's, else
``/aws/lambda/<function name>``) with the function's execution role: it creates the group when it is missing only
if that role may (``logs:CreateLogGroup``, which SAM's generated role has and the template's roles have not:
CloudFormation creates their groups), and otherwise drops the lines, as long as the group is missing (deleted by
hand, say). The shipper does the same for the sandbox's AWS every ``POLL_SECONDS``: each complete line new since
its last look becomes one event, stamped with the time it was read (a second late at most), in a stream of the
day (``YYYY/MM/DD/[$LATEST]sandbox``), or is dropped while its group is missing and may not be created. The
files stay what the sandbox's own tools read.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Collection, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nodecycle_sandbox.iam.evaluate import Request, evaluate
from nodecycle_sandbox.iam.identities import role_of

_log = logging.getLogger(__name__)

POLL_SECONDS = 1.0
# PutLogEvents takes at most 10,000 events and 1,048,576 bytes (each event's UTF-8 size plus 26) a call, and an
# event of at most 256 KiB: lines are sent in batches well within both, a longer line cut
_BATCH_EVENTS = 1000
_BATCH_BYTES = 900_000
_EVENT_BYTES = 256 * 1024 - 26


class FunctionLogs:
    """Ships the lines of each function's log file to its log group, until stopped (a last look then)."""

    def __init__(
        self,
        logs: Any,
        log_dir: Path,
        groups: Mapping[str, str],
        poll: float = POLL_SECONDS,
        creates: Collection[str] = (),
    ) -> None:
        """``groups``: logical id -> log group name; ``creates``: the functions (logical ids) whose role may create
        their group (``logs:CreateLogGroup``), as Lambda does for them when it is missing."""
        self._logs = logs
        self._log_dir = log_dir
        self._groups = dict(groups)
        self._creates = frozenset(creates)
        self._poll = poll
        self._offsets = dict.fromkeys(self._groups, 0)
        self._streams: set[tuple[str, str]] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one look at a time (the thread's, and the last one at the stop)
        self._warned = False
        self._dropped: set[str] = set()  # the groups whose missing was told (once each)

    def start(self) -> FunctionLogs:
        # (lines already in the files are an earlier sandbox's, whose AWS is gone: not this one's to ship)
        for logical_id in self._groups:
            path = self._path(logical_id)
            self._offsets[logical_id] = path.stat().st_size if path.exists() else 0
        self._thread = threading.Thread(target=self._run, name="function-logs", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self.ship()

    def _run(self) -> None:
        while not self._stop.wait(self._poll):
            self.ship()

    def _path(self, logical_id: str) -> Path:
        return self._log_dir / f"{logical_id}.log"

    def ship(self) -> None:
        """Send what each file has gained since the last look (its complete lines)."""
        with self._lock:
            for logical_id, group in self._groups.items():
                try:
                    self._ship(logical_id, group)
                except Exception as error:  # (the AWS side going with the sandbox, a throttle): next look
                    if not self._warned:
                        _log.warning("could not ship the log of %s to %s (%r)", logical_id, group, error)
                        self._warned = True

    def _ship(self, logical_id: str, group: str) -> None:
        path = self._path(logical_id)
        if not path.exists():
            return
        with path.open("rb") as file:
            file.seek(self._offsets[logical_id])
            data = file.read()
        complete = data[: data.rfind(b"\n") + 1]  # (a line being written waits for its newline)
        if not complete:
            return
        now = int(time.time() * 1000)
        lines = [line.decode("utf-8", "replace") for line in complete.splitlines() if line.strip()]
        events = [{"timestamp": now, "message": _cut(line)} for line in lines]
        stream = f"{datetime.now(UTC):%Y/%m/%d}/[$LATEST]sandbox"
        try:
            self._ensure(logical_id, group, stream)
            for batch in _batches(events):
                self._logs.put_log_events(logGroupName=group, logStreamName=stream, logEvents=batch)
        except self._logs.exceptions.ResourceNotFoundException:
            # the group is gone (deleted by hand) and its function's role may not make it again: Lambda drops
            # the lines, and ships the next ones into a stream it makes anew once the group is back
            self._streams.discard((group, stream))
            if group not in self._dropped:
                _log.warning("%s: log group %s does not exist; its lines are dropped", logical_id, group)
                self._dropped.add(group)
        self._offsets[logical_id] += len(complete)

    def _ensure(self, logical_id: str, group: str, stream: str) -> None:
        if (group, stream) in self._streams:
            return
        if logical_id in self._creates:
            with contextlib.suppress(self._logs.exceptions.ResourceAlreadyExistsException):
                self._logs.create_log_group(logGroupName=group)
        with contextlib.suppress(self._logs.exceptions.ResourceAlreadyExistsException):
            self._logs.create_log_stream(logGroupName=group, logStreamName=stream)
        self._streams.add((group, stream))
        self._dropped.discard(group)


def creates_its_group(role: Mapping[str, Any] | None, group_arn: str) -> bool:
    """Whether Lambda, sending a function's output as the function's ``role`` (``{"arn", "trust", "policies"}``;
    None: SAM's generated role, AWSLambdaBasicExecutionRole's ``logs:CreateLogGroup`` on ``*``), may create its
    log group ``group_arn`` (``arn:aws:logs:<region>:<account>:log-group:<name>``)."""
    if role is None:
        return True
    return evaluate(role_of(role).statements, Request("logs:CreateLogGroup", group_arn)).allowed


def _cut(line: str) -> str:
    encoded = line.encode()
    return line if len(encoded) <= _EVENT_BYTES else encoded[:_EVENT_BYTES].decode("utf-8", "ignore")


def _batches(events: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    batches: list[list[dict[str, Any]]] = [[]]
    size = 0
    for event in events:
        cost = len(event["message"].encode()) + 26
        if batches[-1] and (len(batches[-1]) >= _BATCH_EVENTS or size + cost > _BATCH_BYTES):
            batches.append([])
            size = 0
        batches[-1].append(event)
        size += cost
    return [batch for batch in batches if batch]
