"""AWS calls against an endpoint that takes each connection and never answers, on the adapters' real boto3
clients: within a run's time (clients.calls_within) each call ends within it, as the Kubernetes calls do
(eks_access.call_timeout). Without it one call waits out CLIENT_CONFIG's five attempts, a read timeout each, and
the backoffs between them: longer than any nodecycle function's timeout (template.yaml), so the function is killed
mid-call and commits nothing after it (a step's retry, a sweep's log of what it left undone)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest

from nodecycle.adapters.aws import clients
from nodecycle.adapters.aws.autoscaling import AutoscalingActions
from nodecycle.adapters.aws.queues import SqsWorkQueues
from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle.domain.errors import TransientError
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import ActionRef, Step, Transition
from nodecycle.domain.ports.lifecycle import WorkMessage

# How late past the run's time a call may end on a loaded machine: well under what one hung call takes without
# the cut (five read timeouts of 20 s)
LATE_SECONDS = 4.0
RUN_SECONDS = 6.0


class HungEndpoint:
    """An HTTP endpoint that takes each connection, reads the request and never answers, until closed."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.requests = 0
        self._held: list[socket.socket] = []
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self._listener.settimeout(0.1)
        while not self._closed.is_set():
            try:
                connection, _ = self._listener.accept()
            except TimeoutError:
                continue
            connection.settimeout(1.0)
            try:
                if connection.recv(65536):
                    self.requests += 1
            except OSError:
                pass
            self._held.append(connection)  # open and silent until close()

    def close(self) -> None:
        self._closed.set()
        self._thread.join()
        for connection in self._held:
            connection.close()
        self._listener.close()


@pytest.fixture
def hung(monkeypatch: pytest.MonkeyPatch) -> Iterator[HungEndpoint]:
    endpoint = HungEndpoint()
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint.url)  # every client of clients.client() goes there
    yield endpoint
    endpoint.close()


def run_for(seconds: float) -> clients.TimeLeft:
    ends = time.monotonic() + seconds
    return lambda: ends - time.monotonic()


ACTION = ActionRef(
    group="nodes",
    hook="drain",
    instance_id="i-0123456789abcdef0",
    token="6b0f7b38-54a8-4d2c-9d3d-0c1e8b2f1a11",
    transition=Transition.TERMINATING,
)


ACTION_RECORD = f"{ACTION.instance_id}/terminate/{ACTION.token}"


def message() -> WorkMessage:
    return WorkMessage(record_id=ACTION_RECORD, seq=1, step=Step.COMPLETE)


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(
            lambda: SqsWorkQueues({Worker.DRAIN: "http://queue/drain"}).send(Worker.DRAIN, message()),
            id="sqs-send",
        ),
        pytest.param(
            lambda: DynamoRecordStore("records", ttl=timedelta(days=1)).get(ACTION_RECORD), id="dynamodb-get"
        ),
        pytest.param(lambda: AutoscalingActions().heartbeat(ACTION), id="autoscaling-heartbeat"),
    ],
)
def test_a_hung_call_ends_within_the_runs_time(hung: HungEndpoint, call: Callable[[], object]) -> None:
    # Given a run with RUN_SECONDS left, and an endpoint that never answers
    started = time.monotonic()
    # When a call is made through an adapter
    with clients.calls_within(run_for(RUN_SECONDS)), pytest.raises(TransientError):
        call()
    # Then it failed as a transient error within the run's time, having sent what its time allowed
    assert time.monotonic() - started < RUN_SECONDS + LATE_SECONDS
    assert 1 <= hung.requests < clients.MAX_ATTEMPTS


def test_a_call_with_too_little_left_is_not_sent(hung: HungEndpoint) -> None:
    # Given a run with less left than one attempt's connect timeout and shortest read
    # When a heartbeat is asked, Then it is not sent: a transient error the next run retries
    with clients.calls_within(run_for(clients.CONNECT_TIMEOUT)), pytest.raises(clients.CallOutOfTime):
        AutoscalingActions().heartbeat(ACTION)
    assert hung.requests == 0


def test_outside_a_run_the_calls_keep_their_own_timeouts(hung: HungEndpoint) -> None:
    # Given no run's time (a client outside an invocation: a CLI command), Then a call is sent as configured
    made = clients.client("sqs")
    assert made.meta.config.read_timeout == clients.READ_TIMEOUT
    assert made.meta.config.connect_timeout == clients.CONNECT_TIMEOUT
