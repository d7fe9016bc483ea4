"""The ports of the disruption budget: where its document lives, and which nodes are in scope."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from nodecycle.domain.budget.document import BudgetDocument
from nodecycle.domain.budget.limits import NodeState


class BudgetStore(Protocol):
    def read(self) -> BudgetDocument | None:
        """The stored document; None when there is none yet."""
        ...

    def update[T](self, mutate: Callable[[BudgetDocument | None], tuple[BudgetDocument | None, T]]) -> T:
        """Read the document, apply ``mutate`` and write the result if it is still the stored version.

        On a conflict (another writer came first, or created the document first) the whole read-mutate-
        write runs again, a bounded number of times with jittered backoff, so ``mutate`` must be a pure
        function of the document it is given. ``mutate`` returns the document to store and a result;
        returning the very document it was given (None included) writes nothing. Raises
        :class:`~nodecycle.domain.errors.TransientError` when the conflicts or the API do not let up.
        """
        ...


class NodeInventory(Protocol):
    def nodes_in_scope(self) -> list[NodeState]:
        """The nodes the percent limits and unavailable-node counting apply to (may be cached briefly)."""
        ...
