"""boto3 plumbing shared by the AWS adapters: clients made on first use, their configuration, and error
classification."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectionError, HTTPClientError

from nodecycle.domain.errors import AccessRefused, TransientError

# botocore's standard retry mode already backs off on throttling and 5xx; what still fails after it is
# handed to the step engine as a TransientError, which retries the step later instead of sleeping here.
CLIENT_CONFIG = Config(retries={"mode": "standard", "max_attempts": 5}, connect_timeout=5, read_timeout=20)

_TRANSIENT_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "RequestThrottled",
        "RequestThrottledException",
        "SlowDown",
        "InternalError",
        "InternalFailure",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "Unavailable",
        "InternalServerError",
        # the other codes botocore's standard retry mode retries: what still fails after it is as transient
        "EC2ThrottledException",
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
        "BandwidthLimitExceeded",
        "LimitExceededException",
        "TransactionInProgressException",
        # DynamoDB: a PutItem or UpdateItem on an item another writer's transaction holds at that moment (a
        # record written with its claim); botocore does not retry it, a later try meets the item free
        "TransactionConflictException",
    }
)

# How each service says that the caller's role may not make the call (an identity policy, a service control
# policy, a permissions boundary): EC2 UnauthorizedOperation, DynamoDB and the JSON services
# AccessDeniedException, the query services (Auto Scaling, SQS, STS) AccessDenied
_ACCESS_REFUSED_CODES = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation"})


def client(service: str) -> Any:
    """A boto3 client with nodecycle's retry and timeout configuration.

    The endpoint, region and credentials come from the environment as boto3 reads them (including
    ``AWS_ENDPOINT_URL``), so the same code talks to AWS and to a local emulator.
    """
    return boto3.client(service, config=CLIENT_CONFIG)  # type: ignore[call-overload]


class LazyClient[C]:
    """The boto3 client of one service, made on first use: building an adapter (at a cold start, or in a
    test) touches neither the network nor the credentials. A client given up front (a moto or Stubber
    client in tests) is used as it is. Declare it typed:
    ``self._ec2: LazyClient[EC2Client] = LazyClient("ec2", given)``."""

    def __init__(self, service: str, given: C | None = None) -> None:
        self._service = service
        self._client = given

    def __call__(self) -> C:
        if self._client is None:
            self._client = client(self._service)
        return self._client


def error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def is_transient(error: Exception) -> bool:
    if isinstance(error, ClientError):
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return error_code(error) in _TRANSIENT_CODES or status >= 500
    return isinstance(error, ConnectionError | HTTPClientError)


def is_access_refused(error: ClientError) -> bool:
    return error_code(error) in _ACCESS_REFUSED_CODES


@contextmanager
def transient_errors(what: str) -> Iterator[None]:
    """Re-raise what is worth retrying later as the domain's TransientError, and a call the role is refused as
    its :class:`AccessRefused` naming ``what`` and the code (never a ClientError a caller could take for an
    answer, such as "no active lifecycle action"); the rest as it is."""
    try:
        yield
    except (ClientError, ConnectionError, HTTPClientError) as error:
        if is_transient(error):
            raise TransientError(f"{what}: {error}") from error
        if isinstance(error, ClientError) and is_access_refused(error):
            message = str(error.response.get("Error", {}).get("Message", ""))
            raise AccessRefused(what, error_code(error), message) from error
        raise
