"""The disruption budget's ports: where its document lives, which nodes are in scope; and the budget itself
as the drain steps and the sweeper use it (implemented by :class:`~nodecycle.domain.budget.DisruptionBudget`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # annotations only: the budget package imports these ports
    from nodecycle.domain.budget.document import BudgetDocument, Holder, Waiter
    from nodecycle.domain.budget.limits import NodeState
    from nodecycle.domain.budget.requests import SlotDecision, SlotRequest
    from nodecycle.domain.budget.service import SweepResult, Verdict


class BudgetStore(Protocol):
    def read(self) -> BudgetDocument | None:
        """The stored document (an empty one for the ConfigMap as shipped); None when the ConfigMap is not
        there at all (the deployment's cluster side was not applied)."""
        ...

    def update[T](self, mutate: Callable[[BudgetDocument | None], tuple[BudgetDocument | None, T]]) -> T:
        """Read the document, apply ``mutate`` and write the result if it is still the stored version.

        On a conflict (another writer came first) the whole read-mutate-write runs again, a bounded number
        of times with jittered backoff, so ``mutate`` must be a pure function of the document it is given.
        ``mutate`` returns the document to store and a result; returning the very document it was given
        (None included) writes nothing. Raises :class:`~nodecycle.domain.errors.TransientError` when the
        conflicts or the API do not let up; a store never creates the document (the Kubernetes store raises
        its ``BudgetNotInstalled`` when there is none to write to).
        """
        ...


class NodeInventory(Protocol):
    def nodes_in_scope(self) -> list[NodeState]:
        """The nodes the percent limits and unavailable-node counting apply to (may be cached briefly)."""
        ...


class Slots(Protocol):
    """The disruption budget, as the drain steps use it. Each call raises
    :class:`~nodecycle.domain.ports.cluster.Refused` when the API server will not let the budget be read or
    written (403: RBAC)."""

    def acquire(self, request: SlotRequest) -> SlotDecision:
        """A slot for the node, or a place in line; the decision names the waiters to wake (``wake``)."""
        ...

    def renew(self, request: SlotRequest) -> SlotDecision:
        """The node's slot renewed, or taken again, or a place in line; wakes as :meth:`acquire`."""
        ...

    def release(
        self, node: str, record_id: str, token: str | None = None, *, gone: str | None = None
    ) -> list[str]:
        """Give back the slot (or waiting place) of ``node`` held for lifecycle ``record_id`` (of ``token``,
        which takes no slot again); the record ids of waiters that may go now. ``gone``: an instance that goes
        for good, whose entries of this owner go in the same write, as :meth:`forget` removes them."""
        ...

    def forget(self, owner: str, instance_id: str) -> list[str]:
        """Remove ``owner``'s holder and waiter entries of the instance (it is gone); the record ids of
        waiters that may go now."""
        ...


class SweepableBudget(Protocol):
    """The disruption budget, as the sweeper uses it."""

    def sweep(self, *, stale: Callable[[Sequence[Holder | Waiter]], Verdict]) -> SweepResult:
        """Remove this owner's expired entries and those ``stale`` judges stale; pass the room freed on to this
        owner's eligible waiters but those it left unjudged."""
        ...
