"""The sweep of a budget whose ConfigMap is not there (deleted, and not created again): it fails, naming the
ConfigMap and the fix, rather than sweeping nothing and saying nothing while every drain's ask fails."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from nodecycle.adapters.kube.budget import BudgetNotInstalled
from nodecycle.domain.budget import Holder, Verdict, Waiter
from tests.unit.budget.fakes import BudgetFactory, MemoryBudgetStore


def test_a_sweep_of_a_budget_whose_configmap_is_gone_fails_and_says_so(
    make_budget: BudgetFactory, store: MemoryBudgetStore
) -> None:
    budget = make_budget()
    store.uninstall()
    asked: list[Sequence[Holder | Waiter]] = []

    def stale(entries: Sequence[Holder | Waiter]) -> Verdict:
        asked.append(entries)
        return Verdict()

    with pytest.raises(BudgetNotInstalled, match="nodecycle-budget does not exist"):
        budget.sweep(stale=stale)

    assert asked == []  # nothing to judge
    assert store.text is None  # nor created
