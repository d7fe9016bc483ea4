"""EC2's request throttling in the sandbox: a bucket per account, Region and action, with the sizes and refill
rates of "Request throttling for the Amazon EC2 API", shared by every key of the account."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from nodecycle_sandbox.aws.ec2_throttling import THROTTLING, Ec2Throttling, request_bucket, resource_tokens
from nodecycle_sandbox.aws.server import MotoServer

REGION = "eu-west-1"
FUNCTION_KEY = "AKIAEIPFUNCTION00001"
OPERATOR_KEY = "AKIATESTOPERATOR0000"
NO_RETRY = Config(retries={"total_max_attempts": 1, "mode": "standard"})


def _signed(key: str = FUNCTION_KEY, region: str = REGION) -> str:
    return f"AWS4-HMAC-SHA256 Credential={key}/20260101/{region}/ec2/aws4_request, SignedHeaders=host"


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("action", "params", "expected"),
    [
        ("AllocateAddress", {"Domain": ["vpc"]}, ("AllocateAddress", 50.0, 5.0)),
        ("AssociateAddress", {}, ("AssociateAddress", 50.0, 5.0)),
        ("ReleaseAddress", {}, ("ReleaseAddress", 50.0, 5.0)),
        ("DescribeAddresses", {}, ("DescribeAddresses", 100.0, 20.0)),
        ("CreateTags", {}, ("CreateTags", 100.0, 10.0)),
        ("DescribeInstances", {}, ("DescribeInstances unfiltered", 50.0, 10.0)),
        ("DescribeInstances", {"InstanceId.1": ["i-1"]}, ("DescribeInstances unfiltered", 50.0, 10.0)),
        ("DescribeInstances", {"Filter.1.Name": ["instance-id"]}, ("DescribeInstances", 100.0, 20.0)),
        ("DescribeInstances", {"MaxResults": ["5"]}, ("DescribeInstances", 100.0, 20.0)),
        ("RequestSpotInstances", {}, ("RequestSpotInstances", 50.0, 5.0)),
    ],
)
def test_each_action_takes_from_its_documented_bucket(
    action: str, params: dict[str, list[str]], expected: tuple[str, float, float]
) -> None:
    assert request_bucket(action, params) == expected


def test_instances_take_resource_tokens_one_per_instance() -> None:
    assert resource_tokens("RunInstances", {"MaxCount": ["3"], "MinCount": ["1"]}) == 3
    assert resource_tokens("TerminateInstances", {"InstanceId.1": ["i-1"], "InstanceId.2": ["i-2"]}) == 2
    assert resource_tokens("AllocateAddress", {}) == 0


def test_a_burst_past_the_bucket_is_refused_until_it_refills_at_its_rate() -> None:
    clock = _Clock()
    throttling = Ec2Throttling(clock)
    admitted = [throttling.admit(_signed(), "AssociateAddress", {}) for _ in range(60)]
    assert admitted.count(True) == 50  # the bucket's capacity, then nothing
    assert not throttling.admit(_signed(OPERATOR_KEY), "AssociateAddress", {})  # the account's, whoever asks
    assert throttling.admit(_signed(), "DescribeAddresses", {})  # another action, another bucket
    assert throttling.admit(_signed(region="us-east-1"), "AssociateAddress", {})  # another Region
    clock.now = 0.19
    assert not throttling.admit(_signed(), "AssociateAddress", {})
    clock.now = 0.2  # 5 tokens a second: one more
    assert throttling.admit(_signed(), "AssociateAddress", {})
    assert not throttling.admit(_signed(), "AssociateAddress", {})
    clock.now = 1000.0
    assert [throttling.admit(_signed(), "AssociateAddress", {}) for _ in range(51)].count(True) == 50
    refused = throttling.throttled()
    assert {(r.action, r.bucket) for r in refused} == {("AssociateAddress", "AssociateAddress")}


def test_a_request_short_of_resource_tokens_takes_no_request_token() -> None:
    clock = _Clock()
    throttling = Ec2Throttling(clock)
    assert throttling.admit(_signed(), "RunInstances", {"MaxCount": ["1000"]})
    assert not throttling.admit(_signed(), "RunInstances", {"MaxCount": ["1"]})
    assert throttling.throttled()[-1].bucket == "RunInstances resources"
    clock.now = 0.5  # 2 instances a second
    assert throttling.admit(_signed(), "RunInstances", {"MaxCount": ["1"]})


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    server = MotoServer()
    yield server.start()
    server.stop()


@pytest.fixture(autouse=True)
def full_buckets() -> Iterator[None]:
    THROTTLING.reset()
    yield
    THROTTLING.reset()


def _ec2(endpoint: str, key: str) -> Any:
    return boto3.client(
        "ec2",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=key,
        aws_secret_access_key="secret",
        config=NO_RETRY,
    )


def test_the_endpoint_answers_request_limit_exceeded_to_any_key_of_the_account(
    endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(THROTTLING, "_clock", _Clock())  # (no refill while the test sends its burst)
    function, operator = _ec2(endpoint, FUNCTION_KEY), _ec2(endpoint, OPERATOR_KEY)
    for _ in range(50):
        with pytest.raises(ClientError, match=r"InvalidAllocationID\.NotFound"):
            function.release_address(AllocationId="eipalloc-00000000000000000")
    with pytest.raises(ClientError) as refused:
        operator.release_address(AllocationId="eipalloc-00000000000000000")
    assert refused.value.response["Error"]["Code"] == "RequestLimitExceeded"
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    function.describe_addresses()  # another action's bucket is full
    assert [t.action for t in THROTTLING.throttled()] == ["ReleaseAddress"]


def test_throttling_turned_off_refuses_nothing(endpoint: str) -> None:
    THROTTLING.reset(on=False)
    function = _ec2(endpoint, FUNCTION_KEY)
    for _ in range(60):
        with pytest.raises(ClientError, match=r"InvalidAllocationID\.NotFound"):
            function.release_address(AllocationId="eipalloc-00000000000000000")
    assert THROTTLING.throttled() == []
