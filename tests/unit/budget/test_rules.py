"""The pure rules on hand-made documents: cases the service never produces, but a document edited by hand
(or written by a buggy stack) may contain."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.budget import BudgetDocument, BudgetLimits, Holder, Waiter
from nodecycle.domain.budget.limits import owner_limits
from nodecycle.domain.budget.rules import eligible_waiters, prune
from nodecycle.domain.policy import Quantity
from tests.unit.budget.fakes import START


def holder(node: str, owner: str = "blue", renewed_seconds_ago: float = 0, ttl: int = 60) -> Holder:
    renewed = START - timedelta(seconds=renewed_seconds_ago)
    return Holder(
        node=node,
        instance_id=f"i-{node}",
        zone="a",
        owner=owner,
        record_id=f"rec-{node}",
        acquired_at=renewed,
        renewed_at=renewed,
        ttl_seconds=ttl,
    )


def waiter(node: str, owner: str = "blue") -> Waiter:
    return Waiter(
        node=node,
        instance_id=f"i-{node}",
        zone="a",
        owner=owner,
        record_id=f"rec-{node}",
        waiting_since=START,
        renewed_at=START,
        ttl_seconds=60,
    )


def limits(total: int) -> dict[str, object]:
    entry = owner_limits(BudgetLimits(Quantity(value=total)), count_unavailable=False, nodes=None, now=START)
    return {"blue": entry, "green": entry}


def test_a_holder_is_stale_from_the_moment_its_ttl_has_passed_since_its_renewal() -> None:
    doc = BudgetDocument(
        holders=(holder("fresh", renewed_seconds_ago=59.999), holder("due", renewed_seconds_ago=60))
    )
    assert [h.node for h in prune(doc, START).holders] == ["fresh"]


def test_a_node_held_by_one_owner_is_never_eligible_as_another_owners_waiter() -> None:
    doc = BudgetDocument.model_validate(
        {
            "holders": [holder("n1", owner="green")],
            "waiters": [waiter("n1"), waiter("n2")],
            "limits": limits(3),
        }
    )
    assert [w.node for w in eligible_waiters(doc)] == ["n2"]


def test_a_waiter_whose_owner_never_recorded_its_limits_is_not_eligible() -> None:
    doc = BudgetDocument.model_validate({"waiters": [waiter("n1", owner="gone")], "limits": limits(3)})
    assert eligible_waiters(doc) == []


def test_prune_returns_the_same_document_when_nothing_expired() -> None:
    doc = BudgetDocument(holders=(holder("n1"),))
    assert prune(doc, START) is doc


def test_the_limits_of_a_stack_that_left_are_forgotten_after_a_day() -> None:
    # Given the limits of blue (a holder, limits recorded 2 days ago) and green (no entry, recorded 2 days ago)
    old = owner_limits(
        BudgetLimits(Quantity(value=1)), count_unavailable=False, nodes=None, now=START - timedelta(days=2)
    )
    doc = BudgetDocument.model_validate(
        {"holders": [holder("n1", owner="blue")], "limits": {"blue": old, "green": old}}
    )

    # When the document is pruned, Then only the limits of the stack still in the budget remain
    assert list(prune(doc, START).limits) == ["blue"]
