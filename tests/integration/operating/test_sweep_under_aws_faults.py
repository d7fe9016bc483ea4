"""The scheduled sweeper on the sandbox while AWS refuses or throttles some of its calls (the sandbox's AWS fault
layer, for the sweeper's own key only): a service that denies or throttles it fails the parts that need that
service, and no other part. The address part frees a dangling Elastic IP while Auto Scaling throttles the
sweeper and DynamoDB denies it; the annotations' part clears a node's leftover annotations while EC2 denies the
sweeper and Auto Scaling throttles it. Each sweep meanwhile fails (its errors alarm), naming its parts.

One sandbox for the file (a start each was a sandbox's start more): two instances in service, each with the address
its launch allocated and associated (EipMode allocate), the sweeper every 2 s. Each test arms its own faults, for the
sweeper only, and disarms them before it ends."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from nodecycle.domain.ports.addresses import ALLOCATED_AT_TAG, OWNER_TAG
from nodecycle.domain.ports.cluster import IN_PROGRESS_ANNOTATION, OWNER_ANNOTATION
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.group import wait_for
from nodecycle_sandbox.faults import Fault
from tests.integration.lifecycle.harness import OWNER, core_api, node_of, running

pytestmark = pytest.mark.slow

# The sweeper's containers sleep a twentieth of botocore's backoff between retries (the sandbox's compressed
# time): a call throttled past its five attempts still fails after the same five throttled answers, in about
# 0.4 s instead of 7.5 s (up to 15). Each sweep under throttling took some 17 s, most of the file's time.
DANGLING = 20  # addresses left behind at once (a refresh whose releases failed)
ANOTHER_TOOL_KEY = "AKIAANOTHERTOOL00001"  # (a key of the account that is none of nodecycle's)
SETTINGS = {"NODECYCLE_SWEEP_INTERVAL_MINUTES": str(2 / 60), "SANDBOX_AWS_BACKOFF_SCALE": "0.05"}


def sweeps_after(sandbox: Sandbox, armed: float) -> list[tuple[bool, str]]:
    """Whether each sweep that began after ``armed`` (time.time(): the faults armed) and has ended ended well,
    and its error. Not one that began before: its calls made before the faults were armed were answered (counted
    from the journal's length at arming instead, a sweep in flight then was counted, ok, in loaded runs)."""
    return [
        (s.ok, s.error or "")
        for s in sandbox.runner.journal.invocations("SweeperFunction")
        if s.started_at >= armed
    ]


def dangling_address(sandbox: Sandbox) -> str:
    """An address of this stack, unassociated since it was allocated an hour ago (a launch that crashed)."""
    hour_ago = (datetime.now(UTC) - timedelta(hours=1)).isoformat(timespec="seconds")
    tags = [{"Key": OWNER_TAG, "Value": OWNER}, {"Key": ALLOCATED_AT_TAG, "Value": hour_ago}]
    spec = [{"ResourceType": "elastic-ip", "Tags": tags}]
    return str(sandbox.client("ec2").allocate_address(Domain="vpc", TagSpecifications=spec)["AllocationId"])


def allocations(sandbox: Sandbox) -> set[str]:
    return {a["AllocationId"] for a in sandbox.client("ec2").describe_addresses()["Addresses"]}


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with running(
        parameters={"EipMode": "allocate"},
        settings=SETTINGS,
        schedule_interval=2.0,
        size=2,
    ) as started:
        yield started


@pytest.fixture(autouse=True)
def faults_disarmed(sandbox: Sandbox) -> Iterator[None]:
    """Each test's faults disarmed once it is over, failed or not: the next test's sweeps are its own faults' only."""
    yield
    sandbox.aws.disarm_faults()


def test_a_service_that_denies_or_throttles_the_sweeper_stops_only_the_parts_that_need_it(
    sandbox: Sandbox,
) -> None:
    sweeper = sandbox.runner.access_key("SweeperFunction")

    # Given Auto Scaling throttling the sweeper (the orphans' listing, past botocore's retries) and DynamoDB
    # denying it (a key policy changed: no open lifecycle listed, no record read), and an address of this
    # stack left unassociated for an hour
    before = time.time()
    sandbox.aws.arm_faults(
        faults=[
            Fault("asg", "aws-throttle", target="autoscaling.*"),
            Fault("ddb", "aws-denied", target="dynamodb.*"),
        ],
        seed=1,
        callers=[sweeper],
    )
    dangling = dangling_address(sandbox)

    # When the sweeps run, Then the address is released all the same
    wait_for(lambda: dangling not in allocations(sandbox), 90, "the dangling address's release")
    # and the sweeps that ended meanwhile failed, naming the parts that could not run, not the address part
    ended = wait_for(lambda: sweeps_after(sandbox, before), 60, "a sweep that ended")
    assert all(not ok for ok, _ in ended), ended
    assert all("orphans" in error and "addresses" not in error for _, error in ended), ended

    # Given now EC2 denying the sweeper (a service control policy) and Auto Scaling still throttling it,
    # and a node this stack annotated for a lifecycle that is over (its record gone: finished, expired)
    sandbox.aws.arm_faults(
        faults=[
            Fault("asg", "aws-throttle", target="autoscaling.*"),
            Fault("ec2", "aws-denied", target="ec2.*"),
        ],
        seed=2,
        callers=[sweeper],
    )
    instance = sorted(sandbox.asg.in_state("InService"))[0]
    node = node_of(sandbox, instance)
    progress = {"instance": instance, "transition": "terminate", "token": "t-over", "started": "x"}
    annotations = {OWNER_ANNOTATION: OWNER, IN_PROGRESS_ANNOTATION: json.dumps(progress)}
    admin = core_api(sandbox)
    admin.patch_node(node, {"metadata": {"annotations": annotations}})
    before = time.time()  # (a sweep begun before the annotations were written does not judge them)

    def annotated() -> bool:
        metadata = admin.read_node(node).metadata
        found = (metadata.annotations if metadata is not None else None) or {}
        return OWNER_ANNOTATION in found or IN_PROGRESS_ANNOTATION in found

    # When the sweeps run, Then the annotations are kept while Auto Scaling does not answer: a lifecycle missing
    # from this stack's records is another stack's drain when its instance lives in a group this stack does not
    # manage (a shared owner id: domain/sweep/shared_owner.py), which only Auto Scaling (or EC2) tells; cleared,
    # that drain's node would lose its marks mid-drain. The sweeps fail naming the part.
    ended = wait_for(lambda: sweeps_after(sandbox, before), 60, "a sweep that ended")
    assert all(not ok and "annotations" in error for ok, error in ended), ended
    assert annotated()

    # When Auto Scaling answers again (EC2 still denying the sweeper), Then they are cleared: the instance is in
    # this stack's group
    before = time.time()
    sandbox.aws.arm_faults(faults=[Fault("ec2", "aws-denied", target="ec2.*")], seed=3, callers=[sweeper])
    wait_for(lambda: not annotated(), 90, "the leftover annotations cleared")
    ended = wait_for(lambda: sweeps_after(sandbox, before), 60, "a sweep that ended")
    assert all("annotations" not in error for _, error in ended), ended
    sandbox.aws.disarm_faults()


def held_addresses(sandbox: Sandbox) -> dict[str, str]:
    """This stack's addresses associated with an instance: allocation id -> instance."""
    found = sandbox.client("ec2").describe_addresses(
        Filters=[{"Name": f"tag:{OWNER_TAG}", "Values": [OWNER]}]
    )
    return {a["AllocationId"]: a["InstanceId"] for a in found["Addresses"] if a.get("InstanceId")}


def test_sweeps_under_random_aws_faults_never_release_an_address_of_a_live_instance(sandbox: Sandbox) -> None:
    # Given two instances in service, each with the address its launch allocated and associated (EipMode
    # allocate), and an address of this stack left unassociated for an hour
    in_service = set(sandbox.asg.in_state("InService"))

    def launches_held() -> dict[str, str] | None:
        found = held_addresses(sandbox)
        return found if set(found.values()) == in_service else None

    held = wait_for(launches_held, 60, "the launches' addresses")
    dangling = dangling_address(sandbox)

    # When the sweeps run while AWS throttles, fails and denies the sweeper's calls at random (EC2's
    # DescribeInstances denied half the time: the addresses' instances not told)
    before = time.time()
    sandbox.aws.arm_faults(
        faults=[
            Fault("deny-states", "aws-denied", target="ec2.DescribeInstances", probability=0.5),
            Fault("ec2-throttle", "aws-throttle", target="ec2.*", probability=0.3),
            Fault("ec2-error", "aws-error", target="ec2.*", probability=0.2),
            Fault("asg-throttle", "aws-throttle", target="autoscaling.*", probability=0.3),
            Fault("ddb-error", "aws-error", target="dynamodb.*", probability=0.2),
        ],
        seed=38,
        callers=[sandbox.runner.access_key("SweeperFunction")],
    )
    try:
        wait_for(lambda: len(sweeps_after(sandbox, before)) >= 6, 120, "six sweeps under faults")
        fired = {firing.fault for firing in sandbox.aws.fault_firings()}
    finally:
        sandbox.aws.disarm_faults()

    # Then the faults fired, and every address stayed on its live instance (invariant 4)
    assert {"deny-states", "ec2-throttle"} <= fired, fired
    assert held_addresses(sandbox) == held
    # and once they end, the dangling address is released
    wait_for(lambda: dangling not in allocations(sandbox), 60, "the dangling address's release")
    assert held_addresses(sandbox) == held


def another_tool_releasing(sandbox: Sandbox, stop: threading.Event) -> threading.Thread:
    """Another tool of the account sending ReleaseAddress (dry runs: each is a request, which takes its token) as
    fast as EC2 lets it, until ``stop``: EC2 throttles each action per account and Region, whoever sends it
    (ReleaseAddress, a mutating action: 50 tokens, 5 a second; "Request throttling for the Amazon EC2 API")."""
    ec2 = boto3.client(
        "ec2",
        endpoint_url=sandbox.endpoint_url,
        region_name=sandbox.options.region,
        aws_access_key_id=ANOTHER_TOOL_KEY,
        aws_secret_access_key="another-tool-secret",
        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}),
    )

    def spend() -> None:
        while not stop.is_set():
            with contextlib.suppress(ClientError):  # (DryRunOperation, or RequestLimitExceeded: as wanted)
                ec2.release_address(AllocationId="eipalloc-00000000000000000", DryRun=True)
            time.sleep(0.02)

    thread = threading.Thread(target=spend, name="another-tool", daemon=True)
    thread.start()
    return thread


def test_a_sweep_of_many_addresses_on_a_spent_account_releases_them_all_and_no_live_ones(
    sandbox: Sandbox,
) -> None:
    # Given the two instances' own addresses, and many of this stack's addresses left unassociated for an hour
    # while another tool of the account spends EC2's ReleaseAddress bucket
    in_service = set(sandbox.asg.in_state("InService"))

    def launches_held() -> dict[str, str] | None:
        found = held_addresses(sandbox)
        return found if set(found.values()) == in_service else None

    held = wait_for(launches_held, 60, "the launches' addresses")
    sweeper = sandbox.runner.access_key("SweeperFunction")
    stop = threading.Event()
    tool = another_tool_releasing(sandbox, stop)
    try:
        dangling = {dangling_address(sandbox) for _ in range(DANGLING)}

        # When the sweeps run, EC2 refusing the sweeper's releases for the account's rate
        wait_for(
            lambda: any(
                t.caller == sweeper and t.action == "ReleaseAddress" for t in sandbox.aws.ec2_throttled()
            ),
            60,
            "EC2 to refuse the sweeper's releases for the rate",
        )
    finally:
        stop.set()
        tool.join(timeout=5)

    # Then every dangling address is released once the bucket refills, and none of a live instance (invariant 4)
    wait_for(lambda: not dangling & allocations(sandbox), 90, "every dangling address's release")
    assert held_addresses(sandbox) == held
