"""A ReleaseAddress whose answer is lost (a read timeout after EC2 released the address) is sent again by botocore,
and EC2 answers the retry ``InvalidAllocationID.NotFound``. The adapter tells that release as this call's (an
earlier attempt of it may have landed: its answer lost, or a 5xx other than a throttle, as botocore's needs-retry
event tells: see clients.tell_lost_answers), and one found gone at a first attempt, or at a retry after a throttled
attempt (which never reached the address), as another's: so RELEASE_EIP, ASSIGN_EIP's spares and the sweeper count a lost answer alike, as released
(EipsReleased, the room a waiting launch is woken for). Before, RELEASE_EIP and the spares counted it as released
by someone else, the sweeper as its own. On moto, with a real botocore client in the standard retry mode."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.compat import HTTPHeaders
from botocore.exceptions import ReadTimeoutError

from nodecycle.adapters.aws import clients
from nodecycle.adapters.aws.addresses import Ec2Addresses
from nodecycle.domain.eip import release_unassociated
from nodecycle.domain.eip.release import ReleaseAddresses
from nodecycle.domain.ports.addresses import ALLOCATED_AT_TAG, INSTANCE_TAG, OWNER_TAG
from tests.functions.eip.conftest import addresses, allocate, run_instances
from tests.support.fakes import FakeMetrics
from tests.support.stack import Stack
from tests.unit.eip.fakes import OWNER, terminate_record

NOW = datetime.now(UTC)
HOUR_AGO = (NOW - timedelta(hours=1)).isoformat(timespec="seconds")


def ec2_where_release(how: str) -> Any:
    """A botocore EC2 client (nodecycle's configuration: standard retries) whose next ReleaseAddress is released
    by EC2 and then, ``lost``: its answer lost (a read timeout: botocore sends it again); ``raced``: another
    caller released the address just before this call's first attempt; ``throttled``: this call's first attempt
    throttled (refused before it reached the address) while another caller released it, so that botocore's
    retry finds it gone; ``failed``: EC2 released it and answered a 500 (InternalError: botocore sends it
    again)."""
    client = clients.client("ec2")
    moto = boto3.client("ec2")
    done: list[str] = []

    def before_send(request: Any, **_: Any) -> AWSResponse | None:
        if done:
            return None
        allocation = request.body.decode() if isinstance(request.body, bytes) else str(request.body)
        allocation_id = next(
            p.split("=", 1)[1] for p in allocation.split("&") if p.startswith("AllocationId=")
        )
        moto.release_address(AllocationId=allocation_id)
        done.append(allocation_id)
        if how == "lost":
            raise ReadTimeoutError(endpoint_url=request.url)
        if how == "throttled":
            body = b"<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>slow down</Message></Error>"
            return AWSResponse(request.url, 503, HTTPHeaders(), _Raw(body + b"</Errors></Response>"))
        if how == "failed":
            body = b"<Response><Errors><Error><Code>InternalError</Code><Message>oops</Message></Error>"
            return AWSResponse(request.url, 500, HTTPHeaders(), _Raw(body + b"</Errors></Response>"))
        return None

    client.meta.events.register_first("before-send.ec2.ReleaseAddress", before_send)
    return client


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


@pytest.mark.parametrize(
    ("how", "ours"), [("lost", True), ("failed", True), ("raced", False), ("throttled", False)]
)
def test_a_release_whose_answer_was_lost_is_this_calls_and_one_raced_is_anothers(
    stack: Stack, how: str, ours: bool
) -> None:
    address = allocate(**{OWNER_TAG: OWNER, ALLOCATED_AT_TAG: HOUR_AGO})

    assert release_unassociated(Ec2Addresses(ec2_where_release(how)), address) is ours
    assert addresses() == []


@pytest.mark.parametrize(("how", "counted"), [("lost", 1), ("raced", 0), ("throttled", 0)])
def test_release_eip_counts_a_release_whose_answer_was_lost_as_released(
    stack: Stack, how: str, counted: int
) -> None:
    # Given a terminating instance and the address allocated for it (unassociated: it terminated first)
    (instance,) = run_instances(1)
    allocate(**{OWNER_TAG: OWNER, INSTANCE_TAG: instance, ALLOCATED_AT_TAG: HOUR_AGO})
    metrics = FakeMetrics()
    step = ReleaseAddresses(owner=OWNER, addresses=Ec2Addresses(ec2_where_release(how)), metrics=metrics)

    # When RELEASE_EIP releases it and the answer is lost (or another released it first)
    outcome = step(terminate_record(instance), NOW)

    # Then it goes on, the address gone, counted released when it was this call's
    assert not outcome.again
    assert addresses() == []
    assert metrics.counts["EipsReleased"] == counted
