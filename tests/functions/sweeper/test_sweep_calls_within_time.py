"""The sweeper's calls within its invocation's time, on moto. Its parts start an item only with a reserve left
(domain/sweep/sweep_time.py: 45 s for one item's calls), but the calls of an item begun had no end of their own:
one AWS call against an endpoint that never answers waits out five read timeouts (100 s) and the backoffs between
them, past the reserve and the function's timeout. Killed mid-call, the sweep counts nothing (SweepsCutShort, what
it repaired) and logs nothing of what it left undone; an item cut short instead fails alone, as a throttled one
does, and the next sweep takes it up (tests/functions/test_aws_calls_within_time.py: what the cut does to a call
that hangs)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import boto3
import pytest

from nodecycle.adapters.aws.clients import CONNECT_TIMEOUT
from nodecycle.domain.model import Step
from nodecycle.wiring.common import END_RESERVE_SECONDS, STEP_RESERVE_SECONDS, invocation_time
from tests.functions.sweeper.test_sweeper_function import OWNER, record, store, under_a_hook_of
from tests.support.events import load_event
from tests.support.functions import LambdaContext
from tests.support.stack import Stack

REMAINING = 300.0  # the sweeper's timeout (template.yaml)


class CallTimes:
    """Each AWS call made through boto3's default session (the adapters' clients) while recording: its
    operation, the read timeout it was sent with (None: the client's own, no end), and the time the cluster's
    calls had left."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float | None, float | None]] = []
        self._recording = False

    def _after(self, model: Any, context: dict[str, Any], **_: Any) -> None:
        if self._recording:
            self.calls.append((model.name, context.get("read_timeout"), invocation_time().left()))

    @contextmanager
    def recording(self) -> Iterator[None]:
        self._recording = True
        try:
            yield
        finally:
            self._recording = False

    @property
    def operations(self) -> set[str]:
        return {name for name, _, _ in self.calls}


@pytest.fixture
def call_times() -> Iterator[CallTimes]:
    times = CallTimes()
    events = boto3._get_default_session().events
    events.register("after-call", times._after, unique_id="tests.CallTimes")
    try:
        yield times
    finally:
        events.unregister("after-call", unique_id="tests.CallTimes")


def test_every_call_of_a_sweep_ends_within_the_invocations_time(
    sweeper: ModuleType, stack: Stack, call_times: CallTimes
) -> None:
    # Given a lifecycle whose message was lost, and an address of this stack left unassociated for an hour
    now = datetime.now(UTC)
    lost = record(
        "i-0aaaaaaaaaaaaaaa1", Step.RELEASE_EIP, now - timedelta(minutes=5), now - timedelta(minutes=6)
    )
    # (its hook's heartbeat timeout is long: the action needs no heartbeat before the next sweep)
    lost = under_a_hook_of(lost, 3600)
    assert store(stack).create(lost)
    tags: list[Any] = [
        {"Key": "nodecycle:owner", "Value": OWNER},
        {"Key": "nodecycle:allocated-at", "Value": (now - timedelta(hours=1)).isoformat()},
    ]
    boto3.client("ec2").allocate_address(
        Domain="vpc", TagSpecifications=[{"ResourceType": "elastic-ip", "Tags": tags}]
    )

    # When the scheduled sweep runs
    with call_times.recording():
        report = sweeper.handler(
            load_event("sweeper-schedule.json"), LambdaContext(remaining_millis=int(REMAINING * 1000))
        )

    # Then it repaired both, every AWS call of it cut to end within the invocation's time, before the flush of
    # its metrics and log, and the cluster's calls (none in an EIP fleet) had the invocation's time too
    assert (report["LifecyclesResumed"], report["EipsReleasedBySweep"]) == (1, 1)
    assert {"Query", "PutItem", "SendMessage", "DescribeAddresses", "ReleaseAddress"} <= call_times.operations
    for operation, read_timeout, cluster_left in call_times.calls:
        assert read_timeout is not None, operation
        assert read_timeout <= REMAINING - END_RESERVE_SECONDS - CONNECT_TIMEOUT, operation
        assert cluster_left is not None, operation
        assert cluster_left <= REMAINING - STEP_RESERVE_SECONDS, operation
