"""How the Kubernetes adapters classify the API's failures."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kubernetes.client.exceptions import ApiException, UnauthorizedException
from urllib3.exceptions import HTTPError

from nodecycle.domain.errors import TransientError
from nodecycle.domain.ports.cluster import Refused


class OutOfTime(TransientError):
    """A call not made: the run that would make it has no time left for it (see eks_access.call_timeout). Not the
    API server's failure: the step's next run makes it."""


class ClusterUnauthorized(UnauthorizedException):
    """A 401 the API server still answers to a request sent again with a fresh token (see
    eks_access._RenewingApiClient): EKS's authenticator does not know the caller. Its answer says "Unauthorized" and
    nothing else, where a 403 names the user and the verb; this one says where an operator must look: the cluster
    the token was signed for (its x-k8s-aws-id) and whose role."""

    # (all by keyword, with defaults: an exception is pickled as its class and positional arguments, and the answer
    # is no thing to pickle; unpickled, its attributes come back with it)
    def __init__(self, *, http_resp: Any = None, cluster: str = "", principal: str = "") -> None:
        super().__init__(http_resp=http_resp)
        self.cluster = cluster
        self.explained = (
            f"{_message(self)} by EKS cluster {cluster}, with a fresh token: no access entry of that cluster maps "
            f"{principal} (none made, deleted, or made before the role was recreated under its name: the entry "
            f"keeps the old role's ID), or the endpoint is another cluster's than {cluster} (the stack's "
            f"ClusterName, which the token is signed for)"
        )


@contextmanager
def kube_errors(what: str) -> Iterator[None]:
    """Throttling (429), server errors, an expired list continuation (410) and network failures are worth
    retrying later, as a :class:`TransientError`; the rest is raised as it is."""
    try:
        yield
    except ApiException as error:
        if error.status in (410, 429) or (error.status or 0) >= 500:  # 410: a list's continue token expired
            raise TransientError(
                f"{what}: HTTP {error.status} {status_message(error)}", retry_after=retry_after(error)
            ) from error
        raise
    except HTTPError as error:
        raise TransientError(f"{what}: {error}") from error


@contextmanager
def forbidden_refused() -> Iterator[None]:
    """A request the role may not make (403) is that request's answer: a :class:`Refused` the step decides on,
    not an error for the queue to retry and dead-letter. So is a 401 that outlasted the client's retry with a
    fresh token: the cluster no longer knows the role (its access entry deleted, the role recreated under another
    ARN), which no retry of the message mends either. (Other answers are raised as they are.)"""
    try:
        yield
    except ApiException as error:
        if error.status in (401, 403):
            raise Refused(status_message(error)) from error
        raise


def retry_after(error: ApiException) -> float | None:
    """The seconds an answer's Retry-After asks a client to wait (API Priority and Fairness's 429 says it);
    None without one. kube-apiserver gives seconds: an HTTP date is not read."""
    value = (error.headers or {}).get("Retry-After")
    try:
        return None if value is None else float(value)
    except ValueError:
        return None


# core/v1 NamespaceTerminatingCause: the cause of a 403 for a create in a namespace being deleted (kube-apiserver's
# NamespaceLifecycle admission refuses every one there, pods/eviction and events included)
NAMESPACE_TERMINATING = "NamespaceTerminating"


def namespace_terminating(error: ApiException) -> bool:
    """Whether the API server refused a create because its namespace is being deleted: a 403 naming the cause
    ``NamespaceTerminating`` (as client-go's ``HasStatusCause`` reads it), not a role without the verb."""
    if error.status != 403:
        return False
    try:
        details = json.loads(error.body or "{}").get("details") or {}
    except (ValueError, AttributeError):
        return False
    return any(cause.get("reason") == NAMESPACE_TERMINATING for cause in details.get("causes") or [])


# How kube-apiserver words a validating or mutating webhook's denial, whatever code the webhook gave (webhook
# errors.ToStatusErr): 'admission webhook "<name>" denied the request: <its message>' (or "without explanation"),
# prefixed '<resource> "<name>" is forbidden: ' where the webhook gave no code
_WEBHOOK_DENIED = re.compile(r'admission webhook ".+" denied the request')


def webhook_denied(error: ApiException) -> bool:
    """Whether the API server's answer is an admission webhook's denial, in the words kube-apiserver gives it."""
    return bool(_WEBHOOK_DENIED.search(_message(error)))


def status_message(error: ApiException) -> str:
    """The message of the API server's Status answer (its reason when the body is not one); of a
    :class:`ClusterUnauthorized`, what it means."""
    if isinstance(error, ClusterUnauthorized):
        return error.explained
    return _message(error)


def _message(error: ApiException) -> str:
    try:
        return str(json.loads(error.body or "{}").get("message", error.reason))
    except ValueError:
        return str(error.reason)
