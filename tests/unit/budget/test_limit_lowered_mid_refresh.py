"""A budget's limit lowered mid-refresh below the slots held (a redeploy of the stack with BudgetMaxUnavailable 1
instead of 3, its functions' new containers beside the old): the drains in progress keep their slots (a node half
drained is disrupted already; pausing it frees nothing), and no slot is granted or passed on until the holders are
under the new limit. (A container of the old version still serving writes its limit back: the owner's limits are
the last writer's.)"""

from __future__ import annotations

from nodecycle.domain.budget import SlotReason
from tests.unit.budget.conftest import TTL
from tests.unit.budget.fakes import BudgetFactory, FakeClock, slot


def test_a_limit_lowered_below_the_holders_keeps_their_slots_and_grants_none_until_they_are_under_it(
    make_budget: BudgetFactory, clock: FakeClock
) -> None:
    # Given a budget of 3, held by n0, n1 and n2, with n3 and n4 waiting
    old = make_budget(total="3", per_zone=None)
    for i in range(3):
        assert old.acquire(slot(f"n{i}")).granted
    for i in (3, 4):
        assert old.acquire(slot(f"n{i}")).reason is SlotReason.NO_ROOM

    # When the stack is deployed again with a limit of 1, and its drains renew their slots on the new containers
    new = make_budget(total="1", per_zone=None)
    clock.advance(TTL.total_seconds() / 2)
    renewed = [new.renew(slot(f"n{i}")) for i in range(3)]

    # Then they keep them
    assert [r.reason for r in renewed] == [SlotReason.HELD] * 3
    # and nothing is granted, not to a waiter asking again, nor passed on by a release, until one holder is left
    assert new.acquire(slot("n3")).reason is SlotReason.NO_ROOM
    assert new.release("n0", "rec-n0") == []
    assert new.acquire(slot("n4")).reason is SlotReason.NO_ROOM
    assert new.acquire(slot("n3")).reason is SlotReason.NO_ROOM
    assert new.release("n1", "rec-n1") == []
    assert [h.node for h in new.snapshot().holders] == ["n2"]
    assert new.release("n2", "rec-n2") == ["rec-n3"]
    assert [h.node for h in new.snapshot().holders] == ["n3"]
