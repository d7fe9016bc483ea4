"""EC2's request throttling: a token bucket per account, Region and API action, as AWS applies it.

AWS ("Request throttling for the Amazon EC2 API", EC2 developer guide) throttles every EC2 request of an account in
a Region, whoever sends it (an application, the CLI, the console): each API action has its own bucket, which each
request takes one token from, refilled at a set rate up to its maximum capacity; a request that finds the bucket
empty is refused, ``RequestLimitExceeded``, and does nothing. The documented sizes and refill rates (tokens a
second), by action category:

- non-mutating actions (``Describe*``, ``List*``, ``Search*``, ``Get*``): 100, 20;
- unfiltered and unpaginated non-mutating actions (``DescribeInstances``, ``DescribeInstanceStatus``,
  ``DescribeNetworkInterfaces``, ``DescribeSecurityGroups``, ``DescribeSnapshots``,
  ``DescribeSpotInstanceRequests``, ``DescribeVolumes`` sent with neither a filter nor pagination): 50, 10, a
  smaller bucket of their own. The guide names ``Filter`` and pagination (``MaxResults``, ``NextToken``) only:
  a call that names its resources by id (``InstanceIds``), and neither, takes from the smaller bucket here;
- mutating actions (every other action, ``AllocateAddress``, ``AssociateAddress``, ``DisassociateAddress`` and
  ``ReleaseAddress`` among them), and resource-intensive ones: 50, 5;
- uncategorized actions, with their own figures (``CreateTags`` and ``DeleteTags`` 100, 10; ...: ``_OWN``).

Besides, a few actions take resource tokens, one per instance they act on (``RunInstances`` 1,000 refilled at 2,
``TerminateInstances`` 1,000 at 20, ``StartInstances`` 1,000 at 2, ``StopInstances`` 1,000 at 20): a request needs
a token of both buckets. moto throttles nothing, so the sandbox's functions never met a refusal unless a test armed
one (``aws-throttle``, faults.py). Here every EC2 request signed by any key of the account (the functions', the
CLI's, another tool's) takes from the account's buckets, on by default; ``AwsControl.throttle_ec2`` turns it off
or on (and fills the buckets again). Unmetered: the keys it names, the sandbox's own eyes (``Sandbox.client``,
whose tests poll every 50 ms as no operator does: their polls would spend nodecycle's tokens, and fail a test on
its own reads). The buckets refill continuously, on
``time.monotonic`` (botocore's backoff sleeps in real time): the documented rate, never more (AWS adds a
second's tokens at once; spread over the second, the average is the same).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from moto.core import DEFAULT_ACCOUNT_ID

from nodecycle_sandbox.iam.identities import IDENTITIES

# (maximum capacity, refill rate in tokens a second), as the developer guide's tables give them
NON_MUTATING = (100.0, 20.0)
UNFILTERED = (50.0, 10.0)
MUTATING = (50.0, 5.0)
RESOURCE_INTENSIVE = (50.0, 5.0)

_NON_MUTATING_PREFIXES = ("Describe", "List", "Search", "Get")
# The subset of non-mutating actions that take from a smaller bucket when sent without a filter or pagination
_UNFILTERED_ACTIONS = frozenset(
    {
        "DescribeInstances",
        "DescribeInstanceStatus",
        "DescribeNetworkInterfaces",
        "DescribeSecurityGroups",
        "DescribeSnapshots",
        "DescribeSpotInstanceRequests",
        "DescribeVolumes",
    }
)
_RESOURCE_INTENSIVE = frozenset(
    {
        "AcceptVpcPeeringConnection",
        "AuthorizeSecurityGroupIngress",
        "CancelSpotInstanceRequests",
        "CreateKeyPair",
        "CreateVpcPeeringConnection",
        "DeleteVpcPeeringConnection",
        "RejectVpcPeeringConnection",
        "RevokeSecurityGroupIngress",
        "RequestSpotInstances",
    }
)
# Uncategorized actions the sandbox's callers send, with their own figures (the guide's table lists more)
_OWN: Mapping[str, tuple[float, float]] = {
    "CreateTags": (100.0, 10.0),
    "DeleteTags": (100.0, 10.0),
    "CreateNetworkInterface": (100.0, 5.0),
    "DeleteNetworkInterface": (100.0, 5.0),
    "ModifyNetworkInterfaceAttribute": (100.0, 5.0),
    "CreateLaunchTemplateVersion": (100.0, 5.0),
    "ModifyLaunchTemplate": (100.0, 5.0),
    "CreateVolume": (100.0, 5.0),
    "DeleteVolume": (100.0, 5.0),
    "DescribeSpotFleetRequests": (50.0, 3.0),
    "DescribeMovingAddresses": (1.0, 1.0),
}
# Resource token buckets: (maximum capacity, refill rate), one token per instance the request acts on
_RESOURCES: Mapping[str, tuple[float, float]] = {
    "RunInstances": (1000.0, 2.0),
    "TerminateInstances": (1000.0, 20.0),
    "StartInstances": (1000.0, 2.0),
    "StopInstances": (1000.0, 20.0),
}
_PAGINATION = frozenset({"MaxResults", "NextToken"})
_FILTER = re.compile(r"Filter\.\d+\.")
_INSTANCE_ID = re.compile(r"InstanceId\.\d+$")
_SCOPE = re.compile(r"Credential=([^/]+)/[^/]+/([^/]+)/ec2/aws4_request")


def request_bucket(action: str, params: Mapping[str, list[str]]) -> tuple[str, float, float]:
    """The request bucket ``action`` sent with ``params`` takes a token from: its name within the account and
    Region (the action's, suffixed for the smaller bucket of an unfiltered, unpaginated read), size and rate."""
    if action in _OWN:
        return (action, *_OWN[action])
    if action in _UNFILTERED_ACTIONS and not (
        _PAGINATION & params.keys() or any(_FILTER.match(key) for key in params)
    ):
        return (f"{action} unfiltered", *UNFILTERED)
    if action.startswith(_NON_MUTATING_PREFIXES):
        return (action, *NON_MUTATING)
    if action in _RESOURCE_INTENSIVE:
        return (action, *RESOURCE_INTENSIVE)
    return (action, *MUTATING)


def resource_tokens(action: str, params: Mapping[str, list[str]]) -> int:
    """The resource tokens ``action`` takes: one per instance it launches (``MaxCount``) or names."""
    if action not in _RESOURCES:
        return 0
    if action == "RunInstances":
        try:
            return max(1, int((params.get("MaxCount") or ["1"])[0]))
        except ValueError:
            return 1  # (EC2 refuses it on its own: one token is all the refusal cost)
    return max(1, sum(len(values) for key, values in params.items() if _INSTANCE_ID.match(key)))


@dataclass
class _Bucket:
    capacity: float
    rate: float
    tokens: float
    at: float

    def refill(self, now: float) -> None:
        self.tokens = min(self.capacity, self.tokens + (now - self.at) * self.rate)
        self.at = now


@dataclass(frozen=True)
class Throttled:
    """A request refused: its caller (the access key that signed it), account, Region, action and the bucket that
    was empty."""

    caller: str
    account: str
    region: str
    action: str
    bucket: str


class Ec2Throttling:
    """The buckets of every account and Region this process's moto serves."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[tuple[str, str, str], _Bucket] = {}
        self._throttled: list[Throttled] = []
        self._unmetered: frozenset[str] = frozenset()
        self.on = True

    def reset(self, *, on: bool = True, unmetered: Iterable[str] = ()) -> None:
        """Every bucket full again, the refusals forgotten; throttling ``on`` or off; the requests signed with one
        of the ``unmetered`` keys neither refused nor counted."""
        with self._lock:
            self._buckets.clear()
            self._throttled.clear()
            self._unmetered = frozenset(unmetered)
            self.on = on

    def throttled(self) -> list[Throttled]:
        with self._lock:
            return list(self._throttled)

    def admit(self, authorization: str, action: str, params: Mapping[str, list[str]]) -> bool:
        """Whether an EC2 request signed with ``authorization`` may be served: False when a bucket it needs is
        empty (then it takes nothing from the others). Unsigned requests are not AWS's to throttle: moto's own."""
        if not self.on:
            return True
        scope = _SCOPE.search(authorization)
        if scope is None:
            return True
        key, region = scope.groups()
        if key in self._unmetered:
            return True
        principal = IDENTITIES.principal(key)
        account = principal.account if principal is not None else DEFAULT_ACCOUNT_ID
        name, capacity, rate = request_bucket(action, params)
        needs = [((account, region, name), capacity, rate, 1.0)]
        resources = resource_tokens(action, params)
        if resources:
            capacity, rate = _RESOURCES[action]
            needs.append(((account, region, f"{action} resources"), capacity, rate, float(resources)))
        with self._lock:
            now = self._clock()
            buckets = []
            for bucket_key, size, refill, cost in needs:
                bucket = self._buckets.setdefault(bucket_key, _Bucket(size, refill, size, now))
                bucket.refill(now)
                if bucket.tokens < cost:
                    self._throttled.append(Throttled(key, account, region, action, bucket_key[2]))
                    return False
                buckets.append((bucket, cost))
            for bucket, cost in buckets:
                bucket.tokens -= cost
        return True


# The buckets of this process's moto (one per process, as FAULTS): reset when a server starts.
THROTTLING = Ec2Throttling()

THROTTLED_MESSAGE = "Request limit exceeded."
