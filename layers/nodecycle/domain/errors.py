"""Errors the domain understands. Adapters translate their clients' errors into these."""

from __future__ import annotations

from datetime import timedelta

# The longest a retry waits for a server that said when to come back (Retry-After): one shedding load a minute
# ago may serve now, and a drain's poll, slot and heartbeats must not sit out a server's whim for longer
RETRY_AFTER_CAP_SECONDS = 60.0


class TransientError(Exception):
    """A call failed in a way that may succeed later (throttling, a 5xx, a network error, a conflict).

    The step engine retries the step with backoff instead of failing the message. ``retry_after``: the
    seconds the server asked to wait before trying again (an HTTP 429's Retry-After), when it said.
    """

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Contended(TransientError):
    """A transient failure of a call about one object whose Retry-After is that object's, not the server's: the
    eviction of a pod whose PodDisruptionBudget's status writes kept meeting conflicts (many evictions at once under
    it). Retried as any TransientError, but the calls about other objects go on meanwhile: the server is not
    shedding load, and holding them too leaves the pods of every other budget waiting on this one's contention."""


class AccessRefused(TransientError):
    """AWS refused a call to this function's role (AccessDenied, UnauthorizedOperation): a policy edited, a
    service control policy or a permissions boundary rolled out, IAM still propagating after a stack update.

    Transient in that it often lasts minutes, and every place that tries a failed call again later (a
    heartbeat, a wake-up, the step engine) does so for it too; but unlike throttling it does not pass by
    itself. The step engine tells it (the call, the code) and counts it, and retries it only so often before
    it fails the message, so that a denial that stays ends in the dead-letter queue and its alarm.
    ``call``: what was asked (``completing a lifecycle action``); ``code``: AWS's error code."""

    def __init__(self, call: str, code: str, message: str) -> None:
        super().__init__(f"{call}: refused ({code}): {message}")
        self.call = call
        self.code = code


class NotYetHeld(TransientError):
    """A confirmation's look that answered: Auto Scaling lists the instance in its action's group on its way into
    the wait state the action holds it in (a state read lagging the hook's notification). Asked again shortly, as
    any TransientError, but no failed call: nothing was throttled or refused."""


def retry_after_wait(retry_after: float | None, left: timedelta | None = None) -> float:
    """How long a retry waits at least for a server that said Retry-After (0 when it did not): what it asked,
    as client-go waits it, up to ``RETRY_AFTER_CAP_SECONDS``, and never past ``left`` (a drain's time before
    its deadline, when its timeout policy must act)."""
    if retry_after is None:
        return 0.0
    wait = min(retry_after, RETRY_AFTER_CAP_SECONDS)
    if left is not None:
        wait = min(wait, left.total_seconds())
    return max(wait, 0.0)
