"""What a budget store tells of a write it cannot vouch for."""

from __future__ import annotations

from nodecycle.domain.errors import TransientError


class WriteOutcomeUnknown(TransientError):
    """A write of the document was sent, and no answer came back that says whether it was applied: the
    connection closed or timed out after the request went out, or the server failed mid-way (a 5xx). It may
    have landed. Transient, as any failed write: the step is retried. But the budget reads the document back
    first (see :meth:`DisruptionBudget._write`): a write that landed passed slots on to waiters, which only its
    writer wakes, and those would otherwise sit on idle slots until their own retries."""
