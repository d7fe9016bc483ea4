"""A burst of launches taking Elastic IPs on an account whose EC2 request buckets another tool spends, on the
sandbox: EC2 throttles each action of an account per Region (AllocateAddress and AssociateAddress, mutating actions:
50 tokens, 5 a second; "Request throttling for the Amazon EC2 API"), whoever sends it. Every launch still gets
its one address, and none is left behind unassociated."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.group import wait_for
from nodecycle_sandbox.aws.records import LAUNCHING
from tests.integration.lifecycle.harness import running

pytestmark = pytest.mark.slow

LAUNCHES = 4
ANOTHER_TOOL_KEY = "AKIAANOTHERTOOL00001"  # (a key of the account that is none of nodecycle's)
_ONCE = Config(parameter_validation=False, retries={"total_max_attempts": 1, "mode": "standard"})


def another_tool(sandbox: Sandbox, stop: threading.Event) -> threading.Thread:
    """Another tool of the account sending AllocateAddress and AssociateAddress (dry runs: each is a request,
    which takes its token) as fast as EC2 lets it, until ``stop``."""
    ec2 = boto3.client(
        "ec2",
        endpoint_url=sandbox.endpoint_url,
        region_name=sandbox.options.region,
        aws_access_key_id=ANOTHER_TOOL_KEY,
        aws_secret_access_key="another-tool-secret",
        config=_ONCE,
    )

    def spend() -> None:
        while not stop.is_set():
            for call in (
                lambda: ec2.allocate_address(Domain="vpc", DryRun=True),
                lambda: ec2.associate_address(AllocationId="eipalloc-0", InstanceId="i-0", DryRun=True),
            ):
                # (DryRunOperation, or RequestLimitExceeded: the bucket is empty, as wanted)
                with contextlib.suppress(ClientError):
                    call()
            time.sleep(0.02)

    thread = threading.Thread(target=spend, name="another-tool", daemon=True)
    thread.start()
    return thread


def nodecycles_refused(sandbox: Sandbox) -> set[str]:
    """The EC2 actions of nodecycle's functions that EC2 refused for the account's rate so far."""
    return {t.action for t in sandbox.aws.ec2_throttled() if t.caller != ANOTHER_TOOL_KEY}


def addresses(ec2: Any) -> list[dict[str, Any]]:
    return list(ec2.describe_addresses()["Addresses"])


def test_a_burst_of_launches_on_a_spent_account_each_gets_its_one_address_and_none_is_left_behind() -> None:
    with running(parameters={"EipMode": "allocate"}, size=0, workloads=None) as sandbox:
        ec2 = sandbox.client("ec2")
        stop = threading.Event()
        tool = another_tool(sandbox, stop)
        try:
            time.sleep(1.0)  # (the buckets spent before the burst)
            # When the group launches its instances at once, while the other tool goes on for a while
            sandbox.asg.set_desired(LAUNCHES)
            wait_for(lambda: nodecycles_refused(sandbox), 60, "EC2 to refuse nodecycle's calls for the rate")
            time.sleep(2.0)
        finally:
            stop.set()
            tool.join(timeout=5)
        launched = sandbox.asg.wait_in_service(LAUNCHES, timeout=120)

        # Then, though EC2 refused some of nodecycle's calls for the account's rate, every launch went on
        assert {"AllocateAddress", "AssociateAddress"} & nodecycles_refused(sandbox)
        ends = [
            (a.result, a.outcome)
            for a in sandbox.asg.actions(transition=LAUNCHING)
            if a.instance_id in launched
        ]
        assert ends == [("CONTINUE", "completed")] * LAUNCHES, ends
        # each instance holds one address, and no address is left unassociated
        held = addresses(ec2)
        assert sorted(a.get("InstanceId", "") for a in held) == sorted(launched), held
