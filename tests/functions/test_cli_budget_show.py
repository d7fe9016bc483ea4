"""What ``nodecycle budget show`` prints is what the budget ConfigMap holds: the runbook's Budget exceeded entry
looks there for the holders that took their slot without room, and its counts agree with one another and with
the document (an expired entry is listed, and said to count for no one)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nodecycle.domain.budget import BudgetDocument, view_of
from nodecycle.domain.budget.document import Holder, Waiter
from nodecycle_cli.budget import render

NOW = datetime(2026, 12, 4, 23, 0, tzinfo=UTC)


def holder(
    index: int, *, forced: bool = False, seeded: bool = False, renewed: timedelta = timedelta(seconds=10)
) -> Holder:
    return Holder(
        node=f"node-{index}",
        instance_id=f"i-{index:017x}",
        zone="eu-west-1a" if index % 2 else "eu-west-1b",
        owner="blue",
        record_id=f"i-{index:017x}/terminate/t{index}",
        renewed_at=NOW - renewed,
        ttl_seconds=300,
        acquired_at=NOW - renewed,
        forced=forced,
        seeded=seeded,
    )


def section(out: str, title: str) -> list[str]:
    """The lines of the table whose title starts with ``title``, its title first."""
    lines = out.split("\n\n")
    (found,) = [block.splitlines() for block in lines if block.startswith(title)]
    return found


def test_a_holder_that_took_its_slot_without_room_is_marked_forced() -> None:
    # Given a holder that took its slot without room (its action's global timeout near), beside one that did not
    doc = BudgetDocument(holders=(holder(1), holder(2, forced=True)))

    # When the budget is shown to a person
    out = render(view_of(doc, NOW), "nodecycle/nodecycle-budget")

    # Then the forced one is marked so, and only it (the runbook: "holders marked forced")
    rows = {line.split()[0]: line for line in section(out, "HOLDERS")[2:]}
    assert "forced" in rows["node-2"]
    assert "forced" not in rows["node-1"]


def test_a_holder_seeded_into_a_recreated_configmap_is_marked_seeded() -> None:
    # Given a holder seeded from its node's annotations into a ConfigMap created again, whose lifecycle has not
    # asked since (it keeps its slot at that ask only if it fits: docs/runbook.md, Budget ConfigMap deleted)
    doc = BudgetDocument(holders=(holder(1), holder(2, seeded=True)))

    # When the budget is shown to a person
    out = render(view_of(doc, NOW), "nodecycle/nodecycle-budget")

    # Then the seeded one is marked so, and only it
    rows = {line.split()[0]: line for line in section(out, "HOLDERS")[2:]}
    assert "seeded" in rows["node-2"]
    assert "seeded" not in rows["node-1"]


def test_the_holders_and_waiters_counted_are_the_ones_the_zones_count() -> None:
    # Given two holders and a waiter, of which one holder and the waiter expired (renewed no more: a drain that
    # died; the next write removes them), in zones a and b
    expired = timedelta(seconds=400)
    waiter = Waiter(
        node="node-3",
        instance_id="i-3",
        zone="eu-west-1a",
        owner="blue",
        record_id="i-3/terminate/t3",
        renewed_at=NOW - expired,
        ttl_seconds=300,
        waiting_since=NOW - expired,
    )
    doc = BudgetDocument(holders=(holder(1), holder(2, renewed=expired)), waiters=(waiter,))

    # When the budget is shown
    out = render(view_of(doc, NOW), "nodecycle/nodecycle-budget")

    # Then each list says how many of its entries count and how many expired, as the zones count them
    zones = section(out, "ZONES")
    counted = sum(int(line.split()[1]) for line in zones[2:])
    waiting = sum(int(line.split()[2]) for line in zones[2:])
    assert (counted, waiting) == (1, 0)
    assert section(out, "HOLDERS")[0] == "HOLDERS (2: 1 counted, 1 expired and counted by no one)"
    assert section(out, "WAITERS")[0] == "WAITERS (1: 0 counted, 1 expired and counted by no one)"


def test_the_counts_are_plain_when_nothing_expired() -> None:
    out = render(view_of(BudgetDocument(holders=(holder(1), holder(2))), NOW), "nodecycle/nodecycle-budget")
    assert section(out, "HOLDERS")[0] == "HOLDERS (2)"
