"""The rule that bounds how long a looser stack's grants keep a stricter stack's older waiter out (see
``rules._crowded_out``): on hand-made documents, the pass counted, the room kept once passed over, and a stack
alone on the cluster unchanged (its waiters passed over by its own zone ordering keep no room while its own
drains keep them out: work-conserving, as before)."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.budget import BudgetDocument
from nodecycle.domain.budget.rules import MAX_PASSED, claim
from tests.unit.budget.fakes import START, slot
from tests.unit.budget.test_rules import _owners, holder, picks, waiter


def _blue_refresh(passed: int) -> BudgetDocument:
    # green allows 2, blue 3; blue holds 2 (green's view is full), green's g1 waits first, blue's b9 after it
    return BudgetDocument.model_validate(
        {
            "holders": [holder(f"h{i}") for i in range(2)],
            "waiters": [waiter("g1", owner="green", passed=passed), waiter("b9", since=1)],
            "limits": _owners(green=(2, None), blue=(3, None)),
        }
    )


def test_a_looser_stacks_grant_that_leaves_a_stricter_stacks_older_waiter_out_counts_a_pass() -> None:
    # Given blue holding 2 of its 3 (green's 2 full), green's g1 waiting, blue's b9 asking after it
    doc = _blue_refresh(passed=0)

    # When b9 asks and takes blue's third slot
    doc, decision, *_ = claim(
        doc, slot("b9"), now=START + timedelta(seconds=2), ttl=timedelta(seconds=600), renewing=False
    )

    # Then g1, which blue's holders alone keep out of green's view, counts one pass
    assert decision.granted
    g1 = doc.waiter("g1")
    assert g1 is not None
    assert g1.passed == 1


def test_a_stricter_stacks_waiter_passed_over_has_its_room_kept_from_the_looser_stacks_newcomers() -> None:
    # Given the same, g1 passed over MAX_PASSED times: blue's b9 would fit blue's 3
    # Then b9 waits (blue's holders drain down under green's 2 first), where one pass less lets it go
    assert picks(_blue_refresh(passed=MAX_PASSED), seconds=2) == []
    assert picks(_blue_refresh(passed=MAX_PASSED - 1), seconds=2) == ["b9"]


def test_a_waiter_passed_over_that_its_own_stacks_drains_keep_out_keeps_no_room() -> None:
    # Given one stack allowing 3 in all, 1 per zone, its zone a held, and its a1 passed over MAX_PASSED times (by the
    # zone with the most work left) waiting before b1 of zone b
    doc = BudgetDocument.model_validate(
        {
            "holders": [holder("h1")],
            "waiters": [waiter("a1", passed=MAX_PASSED), waiter("b1", zone="b", since=1)],
            "limits": _owners(green=(3, 1), blue=(3, 1)),
        }
    )
    # Then b1 goes: a1 waits for its own stack's drain of zone a, whatever goes beside it
    assert picks(doc, seconds=2) == ["b1"]


def test_a_zone_limit_only_the_stricter_stack_sets_keeps_its_zone_for_its_waiter_passed_over() -> None:
    # Given green allowing 4 in all and 1 per zone, blue 4 and no zone limit; blue holds a node of zone a, green's
    # g1 of zone a waits, passed over MAX_PASSED times by blue's grants there; blue's b9 (zone a) and b10 (zone b)
    # ask after it
    doc = BudgetDocument.model_validate(
        {
            "holders": [holder("h0")],
            "waiters": [
                waiter("g1", owner="green", passed=MAX_PASSED),
                waiter("b9", since=1),
                waiter("b10", zone="b", since=2),
            ],
            "limits": _owners(green=(4, 1), blue=(4, None)),
        }
    )
    # Then b9 waits for zone a to drain for g1; b10 of zone b takes none of g1's room, and goes
    assert picks(doc, seconds=3) == ["b10"]
