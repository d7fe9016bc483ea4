"""The disruption budget: a multi-owner lock on node disruption, limited globally and per zone.

Pure Python over two ports (:class:`BudgetStore`, :class:`NodeInventory`); the rules are in :mod:`.rules`.
"""

from nodecycle.domain.budget.document import (
    FORMAT_VERSION,
    BudgetDocument,
    BudgetFormatError,
    Holder,
    Waiter,
)
from nodecycle.domain.budget.limits import BudgetLimits, NodeState
from nodecycle.domain.budget.ports import BudgetStore, NodeInventory
from nodecycle.domain.budget.requests import SlotDecision, SlotReason, SlotRequest
from nodecycle.domain.budget.service import DisruptionBudget, SweepResult
from nodecycle.domain.budget.view import BudgetView, view_of

__all__ = [
    "FORMAT_VERSION",
    "BudgetDocument",
    "BudgetFormatError",
    "BudgetLimits",
    "BudgetStore",
    "BudgetView",
    "DisruptionBudget",
    "Holder",
    "NodeInventory",
    "NodeState",
    "SlotDecision",
    "SlotReason",
    "SlotRequest",
    "SweepResult",
    "Waiter",
    "view_of",
]
