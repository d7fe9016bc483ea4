"""The eip function on moto: EC2 instances from run_instances, the stack's table and queues (tests/conftest.py),
and an EC2 client that answers the Elastic IP calls as AWS does where moto does not."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Collection, Iterator
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders
from botocore.exceptions import ClientError
from moto import mock_aws

from nodecycle.adapters.aws import clients
from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.ports.addresses import OWNER_TAG
from nodecycle.domain.ports.lifecycle import WorkMessage
from nodecycle_sandbox.aws.ec2_consistency import LAG
from nodecycle_sandbox.aws.install import install
from tests.support.events import sqs_event
from tests.support.functions import LambdaContext, load_function
from tests.support.stack import Stack

IMAGE = "ami-12c6146b"  # one of moto's stock images (listing them all is slow)


def aws_error(code: str, operation: str, message: str = "") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message or code}}, operation)


class AwsLikeEc2:
    """A moto EC2 client, answering the Elastic IP calls as AWS does where moto 5.2 does not.

    - ReleaseAddress of an associated address: moto disassociates and releases it without a word; AWS
      refuses with ``InvalidIPAddress.InUse`` for an address of a nondefault VPC (an EKS cluster's), and
      does as moto for one of a default VPC (``default_vpc``, which a test may set).
    - AllocateAddress: moto has no Elastic IP quota; AWS refuses with ``AddressLimitExceeded`` (here when
      ``quota`` addresses exist).
    - AssociateAddress: moto associates a terminated instance; AWS refuses with ``InvalidInstanceID``. moto
      does honour AllowReassociation=false (``Resource.AlreadyAssociated``), but as a check and then a set
      that two threads can interleave; AWS decides atomically, so the call is serialized here.
    - EC2 is eventually consistent: an address just allocated may be unknown for a while. With ``lag`` set, a
      new address is unknown to the next ``lag`` calls that name or list it: AssociateAddress and
      DescribeAddresses by its allocation id answer ``InvalidAllocationID.NotFound``, a listing leaves it out.
      moto knows it at once. With ``stale`` set, an address just disassociated still shows its association
      (instance and association id) to the next ``stale`` DescribeAddresses that name or list it, as EC2's
      reads lag its writes; moto shows the disassociation at once. (AssociateAddress decides on EC2's own
      state, in which it is free.)
    ``quota`` may be changed by a test; ``failures`` are raised by the next calls of a method;
    ``associations`` records each association made, ``refusals`` each AssociateAddress refused, by code.
    Everything else is moto's, as it is. What EC2 looks up to decide (an instance's state) it looks up with a
    client of its own: a call ``deny`` denies to the function is not denied to EC2 itself.
    """

    def __init__(self, ec2: Any, *, quota: int | None = None, lock: threading.Lock | None = None) -> None:
        self.moto = ec2
        self._itself = boto3.client("ec2")
        self.quota = quota
        self.default_vpc = False
        self._lock = lock or threading.Lock()
        self.lag = 0
        self.stale = 0
        # allocation id -> [reads left that still show it associated, the association they show]
        self._stale: dict[str, list[Any]] = {}
        self._unseen: dict[
            str, int
        ] = {}  # allocation id -> calls naming or listing it that do not know it yet
        self.failures: dict[str, list[BaseException]] = {}
        self.associations: list[tuple[str, str]] = []
        self.refusals: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.moto, name)

    def allocate_address(self, **kwargs: Any) -> Any:
        self._inject("allocate_address")
        with self._lock:
            if self.quota is not None and len(self.moto.describe_addresses()["Addresses"]) >= self.quota:
                raise aws_error("AddressLimitExceeded", "AllocateAddress", "too many addresses allocated")
            allocated = self.moto.allocate_address(**kwargs)
            if self.lag:
                self._unseen[allocated["AllocationId"]] = self.lag
            return allocated

    def describe_addresses(self, **kwargs: Any) -> Any:
        self._inject("describe_addresses")
        found = self.moto.describe_addresses(**kwargs)
        unseen = {a["AllocationId"] for a in found["Addresses"] if self._not_known(a["AllocationId"])}
        if unseen and kwargs.get("AllocationIds"):
            raise aws_error(
                "InvalidAllocationID.NotFound",
                "DescribeAddresses",
                f"The allocation IDs {unseen} do not exist",
            )
        shown = [self._as_read(a) for a in found["Addresses"] if a["AllocationId"] not in unseen]
        return {**found, "Addresses": shown}

    def disassociate_address(self, **kwargs: Any) -> Any:
        self._inject("disassociate_address")
        with self._lock:
            if self.stale:
                for address in self.moto.describe_addresses()["Addresses"]:
                    if address.get("AssociationId") == kwargs["AssociationId"]:
                        association = {
                            key: address[key]
                            for key in (
                                "AssociationId",
                                "InstanceId",
                                "PrivateIpAddress",
                                "NetworkInterfaceId",
                            )
                            if key in address
                        }
                        self._stale[address["AllocationId"]] = [self.stale, association]
            return self.moto.disassociate_address(**kwargs)

    def _as_read(self, address: dict[str, Any]) -> dict[str, Any]:
        """The address as a read that lags a disassociation shows it (see ``stale``)."""
        lagging = self._stale.get(address["AllocationId"])
        if not lagging or lagging[0] <= 0 or address.get("AssociationId"):
            return address
        lagging[0] -= 1
        return {**address, **lagging[1]}

    def associate_address(self, **kwargs: Any) -> Any:
        self._inject("associate_address")
        with self._lock:
            if self._not_known(kwargs["AllocationId"]):
                raise aws_error(
                    "InvalidAllocationID.NotFound",
                    "AssociateAddress",
                    f"{kwargs['AllocationId']} does not exist",
                )
            instance = kwargs["InstanceId"]
            if instance_state(self._itself, instance) != "running":
                self.refusals["InvalidInstanceID"] += 1
                raise aws_error(
                    "InvalidInstanceID", "AssociateAddress", f"{instance} is not in a valid state"
                )
            try:
                associated = self.moto.associate_address(**kwargs)
            except ClientError as error:
                self.refusals[error.response["Error"]["Code"]] += 1
                raise
            self.associations.append((kwargs["AllocationId"], instance))
            return associated

    def release_address(self, **kwargs: Any) -> Any:
        self._inject("release_address")
        with self._lock:
            found = self.moto.describe_addresses(AllocationIds=[kwargs["AllocationId"]])["Addresses"]
            association = found[0].get("AssociationId") if found else None
            if association and not self.default_vpc:
                raise aws_error("InvalidIPAddress.InUse", "ReleaseAddress", "address in use")
            if association:
                self.moto.disassociate_address(AssociationId=association)
            return self.moto.release_address(**kwargs)

    def _not_known(self, allocation_id: str) -> bool:
        """True when EC2 does not know the address yet, for this call (which counts)."""
        left = self._unseen.get(allocation_id, 0)
        if left > 0:
            self._unseen[allocation_id] = left - 1
        return left > 0

    def _inject(self, method: str) -> None:
        pending = self.failures.get(method)
        if pending:
            raise pending.pop(0)


def instance_state(ec2: Any, instance_id: str) -> str | None:
    found = ec2.describe_instances(Filters=[{"Name": "instance-id", "Values": [instance_id]}])
    states = [i["State"]["Name"] for r in found["Reservations"] for i in r["Instances"]]
    return states[0] if states else None


def deny(ec2: Any, operation: str, *, allocation_ids: Collection[str] | None = None) -> None:
    """From now on, EC2 denies ``operation`` (``DescribeInstances``) to ``ec2`` (a real boto3 client), as IAM
    or a service control policy does: ``UnauthorizedOperation``, HTTP 403. The other calls go through. With
    ``allocation_ids``, only the calls naming one of those addresses (a condition on their tags)."""

    def denied(params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        if allocation_ids is not None and params.get("body", {}).get("AllocationId") not in allocation_ids:
            return None
        error = {
            "Code": "UnauthorizedOperation",
            "Message": "You are not authorized to perform this operation.",
        }
        return AWSResponse("https://ec2", 403, HTTPHeaders(), None), {"Error": error, "ResponseMetadata": {}}

    # (a before-call handler that answers is botocore's answer to the call)
    ec2.meta.events.register(f"before-call.ec2.{operation}", denied)


def api_calls(ec2: Any) -> Counter[str]:
    """Counts of the API operations ``ec2`` (a real boto3 client) sends from now on."""
    calls: Counter[str] = Counter()

    def count(model: Any, **_: Any) -> None:
        calls[model.name] += 1

    ec2.meta.events.register("before-call.ec2.*", count)
    return calls


class Clock:
    """The clock of the sandbox's EC2 lag (nodecycle_sandbox.aws.ec2_consistency), moved by the test: no test
    sleeps out a lag."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def ec2_signing_as(key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every EC2 client nodecycle makes signs with access key ``key`` (the caller whose reads the EC2 lag may hold
    back); the lag's hooks installed into moto."""
    install()
    lagging = boto3.client("ec2", aws_access_key_id=key, aws_secret_access_key="testing")
    made = clients.client
    monkeypatch.setattr(clients, "client", lambda service: lagging if service == "ec2" else made(service))


def lagging_clock(key: str, monkeypatch: pytest.MonkeyPatch, armed: float | None = None) -> Iterator[Clock]:
    """A lag test's clock fixture (``yield from`` it): nodecycle's EC2 clients sign with ``key``, the lag's clock
    is the test's (armed for ``armed`` seconds of lag from the start, else by the test), and the lag is disarmed
    after the test, whatever it armed."""
    ec2_signing_as(key, monkeypatch)
    clock = Clock()
    if armed is not None:
        LAG.arm(armed, [key], clock)
    try:
        yield clock
    finally:
        LAG.disarm()


def run_instances(count: int) -> list[str]:
    launched = boto3.client("ec2").run_instances(
        ImageId=IMAGE, MinCount=count, MaxCount=count, InstanceType="t4g.small"
    )
    return [instance["InstanceId"] for instance in launched["Instances"]]


def allocate(**tags: str) -> str:
    ec2: Any = boto3.client("ec2")
    spec = [{"ResourceType": "elastic-ip", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]
    return str(ec2.allocate_address(Domain="vpc", TagSpecifications=spec)["AllocationId"])


def ours(owner: str = "stack-a") -> list[dict[str, Any]]:
    """The addresses tagged for ``owner`` (default: tests/conftest.py's stack's)."""
    return addresses(**{f"tag:{OWNER_TAG}": owner})


def addresses(**filters: str) -> list[dict[str, Any]]:
    ec2: Any = boto3.client("ec2")
    found = ec2.describe_addresses(
        Filters=[{"Name": name, "Values": [value]} for name, value in filters.items()]
    )
    return list(found["Addresses"])


def store(stack: Stack) -> DynamoRecordStore:
    return DynamoRecordStore(stack.table, ttl=timedelta(days=14))


def now() -> datetime:
    return datetime.now(UTC)


def given(stack: Stack, record: LifecycleRecord) -> LifecycleRecord:
    assert store(stack).create(record)
    return record


def current(stack: Stack, record: LifecycleRecord) -> LifecycleRecord:
    found = store(stack).get(record.id)
    assert found is not None
    return found


def due_now(stack: Stack, record: LifecycleRecord) -> LifecycleRecord:
    """The record as its next run comes due (the test does not wait for the step's delay)."""
    stored = current(stack, record)
    if stored.finished:
        return stored
    due = stored.model_copy(update={"due_at": now()})
    assert store(stack).commit(due, expected_seq=stored.seq)
    return due


def work_event(*records: LifecycleRecord) -> dict[str, Any]:
    """An SQS batch of the EIP queue: one work message per record, for its current step and seq."""
    bodies = [WorkMessage(record_id=r.id, seq=r.seq, step=r.step).model_dump_json() for r in records]
    return sqs_event(*bodies)


@pytest.fixture
def ec2(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> AwsLikeEc2:
    """The client the eip function's EC2 adapter gets (instead of a plain moto client), over moto with the
    sandbox's EC2 emulations installed: without them a test that asks only the adapter would meet moto's own
    answers, or the emulations, as the tests run before it in the same process decided."""
    install()
    aws_like = AwsLikeEc2(boto3.client("ec2"))
    made = clients.client
    monkeypatch.setattr(clients, "client", lambda service: aws_like if service == "ec2" else made(service))
    return aws_like


@pytest.fixture
def clock() -> Iterator[Clock]:
    """The lag's clock, inside moto's mock with the sandbox's emulations installed, the lag disarmed at the end
    (a test arms it for the callers it wants behind)."""
    install()
    clock = Clock()
    with mock_aws():
        try:
            yield clock
        finally:
            LAG.disarm()


@pytest.fixture
def eip_fn(stack: Stack, ec2: AwsLikeEc2, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    install()  # moto lacks CompleteLifecycleAction, which the eip function calls: the sandbox's emulation adds it
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "allocate")
    return load_function("eip")


def pool_function(monkeypatch: pytest.MonkeyPatch, pool: str, *, grows: bool = False) -> ModuleType:
    """The eip function in pool mode, ``pool`` growing when empty or not, its failure policy abandon."""
    install()  # (CompleteLifecycleAction, which moto lacks)
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "pool")
    monkeypatch.setenv("NODECYCLE_EIP_POOL_NAME", pool)
    monkeypatch.setenv("NODECYCLE_EIP_POOL_ALLOCATE_WHEN_EMPTY", "true" if grows else "false")
    monkeypatch.setenv("NODECYCLE_EIP_FAILURE_POLICY", "abandon")
    return load_function("eip")


def run_while(
    fn: ModuleType, stack: Stack, clock: Clock, record: LifecycleRecord, *steps: Step
) -> LifecycleRecord:
    """Deliver the record's messages while it is at one of ``steps``, each when due: the lag's clock moved on by
    the step's own delay (the lag tests' driver)."""
    for _ in range(60):
        stored = current(stack, record)
        if stored.finished or stored.step not in steps:
            return stored
        clock.now += max(0.0, (stored.due_at - stored.updated_at).total_seconds()) if stored.due_at else 0.0
        response = fn.handler(work_event(due_now(stack, stored)), LambdaContext())
        assert response.get("batchItemFailures", []) == []
    raise AssertionError(f"still at {stored.step} after 60 runs")
