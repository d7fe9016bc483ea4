"""Validating admission webhooks, as kube-apiserver applies their answers: a write a webhook denies is answered
with the webhook's status and nothing is done. The message is ``admission webhook "<name>" denied the request:
<message>``, the code the webhook's (400 when it gave none of 400 or more). Admission judges writes only
(create, update, patch, delete), after authorization: an eviction is a create of ``pods/eviction``, never a
delete of ``pods``.

A webhook here is its decision, not a server to call: the operation it denies (CREATE, UPDATE, DELETE) on
which resource, for which namespaces and object names (globs), with what it answers. Webhooks answer what
their authors chose: a policy engine's 403 ("this pod may not be deleted"), a 400, an operator that guards its
pods and says 503 "not now, try again later".

    server.admission.deny(Denial("guard.example.com", "DELETE", "pods", "shop", "db-*", code=403))

And webhooks that do not answer (:class:`Unanswered`): the request waits their timeout, then fails (500) or goes on,
as their failurePolicy says.

    server.admission.leave_unanswered(Unanswered("kyverno-svc.kyverno.svc", "CREATE", "pods/eviction", seconds=10))
"""

from __future__ import annotations

import fnmatch
import threading
import time
from dataclasses import dataclass

from nodecycle_sandbox.kube import errors
from nodecycle_sandbox.kube.rbac import Attributes

_OPERATIONS = {
    "create": "CREATE",
    "update": "UPDATE",
    "patch": "UPDATE",
    "delete": "DELETE",
    "deletecollection": "DELETE",
}


@dataclass(frozen=True)
class Denial:
    """A webhook that denies ``operation`` on ``resource`` (``pods``, ``pods/eviction``) for the objects whose
    namespace and name match the globs, answering ``code``, ``reason`` and ``message``."""

    webhook: str
    operation: str
    resource: str
    namespace: str = "*"
    name: str = "*"
    code: int = 400
    reason: str = ""
    message: str = ""

    def applies(self, operation: str, resource: str, attributes: Attributes) -> bool:
        return (
            (self.operation, self.resource) == (operation, resource)
            and fnmatch.fnmatchcase(attributes.namespace, self.namespace)
            and fnmatch.fnmatchcase(attributes.name, self.name)
        )

    def error(self) -> errors.ApiError:
        denied = f'admission webhook "{self.webhook}" denied the request'
        message = f"{denied}: {self.message}" if self.message else f"{denied} without explanation"
        return errors.ApiError(max(self.code, 400), self.reason, message)


@dataclass(frozen=True)
class Unanswered:
    """A webhook on ``operation`` of ``resource`` (namespace and name globs as :class:`Denial`'s) that does not
    answer within its ``timeoutSeconds`` (its pods overloaded, their node gone, a network policy in the way): the
    API server waits that long for it, then, under ``failurePolicy: Fail``, answers 500 InternalError ``failed
    calling webhook ... context deadline exceeded`` with nothing done; under ``Ignore``, goes on with the request as
    if the webhook had allowed it, that much later. (kube-apiserver's default timeoutSeconds is 10, at most 30.)"""

    webhook: str
    operation: str
    resource: str
    namespace: str = "*"
    name: str = "*"
    seconds: float = 10.0
    failure_policy: str = "Fail"

    def __post_init__(self) -> None:
        if self.failure_policy not in ("Fail", "Ignore"):
            raise ValueError(f"failurePolicy is Fail or Ignore, not {self.failure_policy!r}")

    def applies(self, operation: str, resource: str, attributes: Attributes) -> bool:
        return Denial(self.webhook, self.operation, self.resource, self.namespace, self.name).applies(
            operation, resource, attributes
        )

    def error(self) -> errors.ApiError:
        url = f"https://{self.webhook}:443/validate?timeout={self.seconds:g}s"
        return errors.internal_error(
            f'failed calling webhook "{self.webhook}": failed to call webhook: Post "{url}": context deadline '
            "exceeded"
        )


@dataclass(frozen=True)
class Denied:
    """A request a webhook denied: when (``time.time()``), which webhook, and what was asked."""

    at: float
    webhook: str
    operation: str
    resource: str
    namespace: str
    name: str


class Admission:
    """The webhooks of the API server; none until a test registers one. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._denials: list[Denial] = []
        self._unanswered: list[Unanswered] = []
        self._denied: list[Denied] = []

    def deny(self, denial: Denial) -> None:
        with self._lock:
            self._denials.append(denial)

    def leave_unanswered(self, webhook: Unanswered) -> None:
        with self._lock:
            self._unanswered.append(webhook)

    def clear(self) -> None:
        """Remove every webhook (what they denied stays on record)."""
        with self._lock:
            self._denials = []
            self._unanswered = []

    def wait(self, attributes: Attributes) -> None:
        """Wait as the API server waits for the webhooks of this request that do not answer (their timeouts, one
        after the other: validating webhooks are called in parallel, but a test registers one per request). Before
        the request is served, outside the sandbox's store lock, so that other requests are served meanwhile as
        kube-apiserver serves them."""
        operation = _OPERATIONS.get(attributes.verb)
        if operation is None:
            return
        resource = "/".join(part for part in (attributes.resource, attributes.subresource) if part)
        with self._lock:
            seconds = max(
                (u.seconds for u in self._unanswered if u.applies(operation, resource, attributes)),
                default=0.0,
            )
        if seconds > 0:
            time.sleep(seconds)

    def denied(self) -> list[Denied]:
        """Every request denied so far, in order."""
        with self._lock:
            return list(self._denied)

    def review(self, attributes: Attributes) -> None:
        """Raise the answer of the first webhook that denies this request; reads pass."""
        operation = _OPERATIONS.get(attributes.verb)
        if operation is None:
            return
        resource = "/".join(part for part in (attributes.resource, attributes.subresource) if part)
        with self._lock:
            denial: Denial | Unanswered | None = next(
                (d for d in self._denials if d.applies(operation, resource, attributes)), None
            )
            if denial is None:
                denial = next(
                    (
                        u
                        for u in self._unanswered
                        if u.failure_policy == "Fail" and u.applies(operation, resource, attributes)
                    ),
                    None,
                )
            if denial is None:
                return
            self._denied.append(
                Denied(
                    time.time(), denial.webhook, operation, resource, attributes.namespace, attributes.name
                )
            )
        raise denial.error()
