"""The disruption budget: a multi-owner lock on node disruption, limited globally and per zone.

Pure Python over two ports (:class:`~nodecycle.domain.ports.budget.BudgetStore`,
:class:`~nodecycle.domain.ports.budget.NodeInventory`); the rules are in :mod:`.rules`.
"""

from nodecycle.domain.budget.document import (
    FORMAT_VERSION,
    BudgetDocument,
    BudgetFormatError,
    Holder,
    Waiter,
)
from nodecycle.domain.budget.limits import BudgetLimits, NodeState
from nodecycle.domain.budget.requests import SlotDecision, SlotReason, SlotRequest
from nodecycle.domain.budget.service import DisruptionBudget, Lifecycles, SweepResult, Verdict
from nodecycle.domain.budget.view import BudgetView, view_of

__all__ = [
    "FORMAT_VERSION",
    "BudgetDocument",
    "BudgetFormatError",
    "BudgetLimits",
    "BudgetView",
    "DisruptionBudget",
    "Holder",
    "Lifecycles",
    "NodeState",
    "SlotDecision",
    "SlotReason",
    "SlotRequest",
    "SweepResult",
    "Verdict",
    "Waiter",
    "view_of",
]
