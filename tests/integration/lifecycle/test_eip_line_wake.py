"""An address given back to an empty pool wakes the launch first in its line, on the sandbox: the launch claims
it in the run of the wake-up that the terminate's RELEASE_EIP sends, not at its own next look (15 s on)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nodecycle.domain.model import Transition
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.group import wait_for
from tests.integration.lifecycle.harness import (
    POOL,
    a_launch_waiting_for_an_empty_pool,
    find_record,
    running,
)

pytestmark = pytest.mark.slow


def holder(ec2: Any, allocation_id: str) -> str | None:
    (address,) = ec2.describe_addresses(AllocationIds=[allocation_id])["Addresses"]
    return address.get("InstanceId")


def messages(sandbox: Sandbox, record_id: str, call: str) -> list[dict[str, Any]]:
    """The messages of ``record_id`` that the eip function's invocations making ``call`` carried."""
    return [
        body
        for invocation in sandbox.runner.journal.invocations(function="EipFunction")
        if invocation.api_calls.get(call)
        for body in (json.loads(r["body"]) for r in (invocation.event or {}).get("Records", []))
        if body.get("record_id") == record_id
    ]


def test_an_address_given_back_is_claimed_by_the_waiting_launch_in_the_run_of_its_wake_up() -> None:
    # Given a pool of one address, on the group's one instance, and a second launch waiting for an address
    parameters = {"EipMode": "pool", "EipPoolName": POOL, "EipWaitSeconds": "300"}
    with running(parameters=parameters, size=0, workloads=None) as sandbox:
        # (the eip function's containers started before the scene: the wake-up comes while the release's own run
        # goes on, and a container started for it then took 10 s on a loaded machine, so the launch's own look
        # came first and claimed the address; an invocation's time, not a cold start, is what the 15 s are for)
        sandbox.runner.warm("EipFunction", 3)
        ec2 = sandbox.client("ec2")
        pooled, old, waiting = a_launch_waiting_for_an_empty_pool(sandbox)
        record = find_record(sandbox, waiting, Transition.LAUNCHING)
        assert record is not None
        assert messages(sandbox, record.id, "ec2.AssociateAddress") == []

        # When the old instance terminates, its address given back once drained
        sandbox.asg.terminate(old, decrement=True)
        wait_for(lambda: holder(ec2, pooled) == waiting, 90, "the waiting launch to hold the address")
        sandbox.asg.wait_in_service(1, timeout=60)

        # Then the address was associated in the run of a wake-up, not of the launch's own delayed look
        claims = messages(sandbox, record.id, "ec2.AssociateAddress")
        assert claims, "no run of the waiting launch associated the address"
        assert all(claim.get("wake") for claim in claims), claims
