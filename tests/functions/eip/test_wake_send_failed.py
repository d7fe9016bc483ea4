"""A wake-up that fails in any other way than a throttle or a denial (SQS refusing it for the queue's KMS key, a
bug of the message) is as best effort as those: the release that sends it goes on at once (its message done, its
address released once), the failure told in a log line, and the waiting launch allocates at its own look. On moto, through the eip function."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import pytest

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
from tests.functions.eip.test_wake_send_refused import RefusingWakeUps
from tests.support.functions import LambdaContext
from tests.support.stack import Stack, receive_all
from tests.unit.eip.fakes import launch_record, terminate_record

OWNER = "stack-a"  # tests/conftest.py's stack


@pytest.mark.parametrize(
    ("code", "status"), [("KMS.DisabledException", 400), ("KMS.AccessDeniedException", 400)]
)
def test_a_wake_up_sqs_fails_otherwise_neither_fails_the_release_nor_goes_untold(
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

    # When the old instance's terminate releases its address, and SQS fails the wake-up it sends
    sqs.refusing = True
    releases: list[str] = []
    release = ec2.release_address

    def counted(**kwargs: Any) -> Any:
        releases.append(kwargs["AllocationId"])
        return release(**kwargs)

    monkeypatch.setattr(ec2, "release_address", counted)
    leaving = given(stack, terminate_record(old, at=now()))
    response = eip_fn.handler(work_event(leaving), LambdaContext())

    # Then the release did not fail (its message done, the lifecycle past the step), the address released once
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
