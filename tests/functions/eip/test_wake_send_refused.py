"""SQS refusing the wake-up that RELEASE_EIP sends to the first launch waiting for the quota (throttled, denied: a
policy edited), or failing it in any other way (refusing it for the queue's KMS key, a bug of the message), costs
that launch time, never the release: the terminate goes on at once, its address released once (no retry of the
step, no second ReleaseAddress), the lost wake-up told in a log line, and the waiting launch allocates at its own
look. On moto, through the eip function: the SQS client refuses the wake-up's SendMessage as SQS answers."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from nodecycle.adapters.aws import clients
from nodecycle.domain.model import Step
from nodecycle.domain.ports.addresses import INSTANCE_TAG, OWNER_TAG
from tests.functions.eip.conftest import (
    AwsLikeEc2,
    addresses,
    current,
    due_now,
    given,
    now,
    run_instances,
    work_event,
)
from tests.support.functions import LambdaContext
from tests.support.stack import Stack, receive_all
from tests.unit.eip.fakes import launch_record, terminate_record

OWNER = "stack-a"  # tests/conftest.py's stack


class RefusingWakeUps:
    """An SQS client that, once ``refusing``, refuses SendMessage of a wake-up with ``code`` (HTTP ``status``),
    as SQS answers; the other messages go."""

    def __init__(self, code: str, status: int) -> None:
        self.sqs: Any = boto3.client("sqs")
        self.code, self.status = code, status
        self.refusing = False
        self.refused = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sqs, name)

    def send_message(self, **kwargs: Any) -> Any:
        if self.refusing and json.loads(kwargs["MessageBody"]).get("wake"):
            self.refused += 1
            error: Any = {
                "Error": {"Code": self.code, "Message": self.code},
                "ResponseMetadata": {"HTTPStatusCode": self.status},
            }
            raise ClientError(error, "SendMessage")
        return self.sqs.send_message(**kwargs)


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("RequestThrottled", 400),
        ("AccessDenied", 403),
        ("KMS.DisabledException", 400),
        ("KMS.AccessDeniedException", 400),
    ],
)
def test_a_refused_wake_up_neither_fails_nor_repeats_the_release_and_the_waiter_allocates_at_its_own_look(
    eip_fn: ModuleType,
    ec2: AwsLikeEc2,
    stack: Stack,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    code: str,
    status: int,
) -> None:
    # Given an account at its quota of one address, held by an old instance, and a launch waiting for the quota
    sqs = RefusingWakeUps(code, status)
    made = clients.client
    monkeypatch.setattr(clients, "client", lambda service: sqs if service == "sqs" else made(service))
    old, waiting = run_instances(2)
    eip_fn.handler(work_event(given(stack, launch_record(old, at=now()))), LambdaContext())
    ec2.quota = 1
    launch = given(stack, launch_record(waiting, at=now()))
    eip_fn.handler(work_event(launch), LambdaContext())
    assert current(stack, launch).step is Step.ASSIGN_EIP

    # When the old instance's terminate releases its address, and SQS refuses (or fails) the wake-up it sends
    sqs.refusing = True
    releases: list[str] = []
    release = ec2.release_address

    def counted(**kwargs: Any) -> Any:
        releases.append(kwargs["AllocationId"])
        return release(**kwargs)

    monkeypatch.setattr(ec2, "release_address", counted)
    leaving = given(stack, terminate_record(old, at=now()))
    response = eip_fn.handler(work_event(leaving), LambdaContext())

    # Then the wake-up was refused, the release did not fail (its message done, the lifecycle past the step), and
    # the address was released once
    assert sqs.refused == 1
    assert response.get("batchItemFailures", []) == []
    assert current(stack, leaving).step is not Step.RELEASE_EIP
    assert len(releases) == 1
    assert addresses(**{f"tag:{INSTANCE_TAG}": old, f"tag:{OWNER_TAG}": OWNER}) == []
    assert not [m for m in receive_all(stack.eip_queue) if json.loads(m["Body"]).get("wake")]
    # And the lost wake-up is told
    assert any("could not wake" in r.getMessage() and code in r.getMessage() for r in caplog.records)
    # And the waiting launch allocates at its own look
    eip_fn.handler(work_event(due_now(stack, launch)), LambdaContext())
    assert current(stack, launch).step is not Step.ASSIGN_EIP
    assert len(addresses(**{f"tag:{INSTANCE_TAG}": waiting})) == 1
