"""A percent limit after the budget ConfigMap was created again, while the nodes of drains that just ended linger.

A percent is of the nodes that can serve: the node objects of instances whose drain ended and gave its slot back
outlive them (until the cloud provider deletes them, seconds to a minute later), and the marks of those slots
given back (``released``) take them out of the scope (see ``limits.in_scope``). The marks go with the ConfigMap,
and the nodes do not tell them (the cleanup clears the drain's annotations; without BudgetCountUnavailable only
the nodes' metadata is listed): once it is created again, those nodes count in the scope, and the percent grows
past the nodes really there until they are deleted (invariant 1). So the nodes show it: the cleanup of a node
whose instance leaves service marks it released for its lifecycle (``nodecycle.io/released-for``, as for the warm
pool), which the inventory reads (``NodeState.released``) and the scope leaves out, whatever the document says
(tests/integration/budget/test_released_nodes_after_recreation.py shows it through the cleanup and the adapters
on the sandbox API server)."""

from __future__ import annotations

from dataclasses import replace

from tests.unit.budget.fakes import (
    START,
    BudgetFactory,
    FakeClock,
    FakeInventory,
    MemoryBudgetStore,
    node,
    slot,
)


def test_the_nodes_of_drains_just_ended_do_not_grow_a_percent_after_the_configmap_is_recreated(
    make_budget: BudgetFactory, store: MemoryBudgetStore, clock: FakeClock, inventory: FakeInventory
) -> None:
    # Given 6 nodes listed, a budget of 50%, and the drains of n4 and n5 over (their node objects still there)
    inventory.nodes = [node(f"n{i}") for i in range(6)]
    blue = make_budget(total="50%", per_zone=None)
    for name in ("n4", "n5"):
        assert blue.acquire(slot(name)).granted
        assert blue.release(name, f"rec-{name}") == []
    # (their cleanups marked the nodes released, as they cleared their annotations)
    inventory.nodes = [node(f"n{i}") for i in range(4)] + [
        replace(node(name), schedulable=False, released=True) for name in ("n4", "n5")
    ]
    # (50% of the 4 nodes that serve: 2)
    assert [blue.acquire(slot(n)).granted for n in ("n0", "n1", "n2")] == [True, True, False]
    for name in ("n0", "n1", "n2"):
        blue.release(name, f"rec-{name}")

    # When the ConfigMap is created again, and the next lifecycles of n0, n1, n2 and n3 ask
    store.uninstall()
    store.reinstall(at=START)
    clock.advance(5)
    granted = [
        blue.acquire(replace(slot(n), record_id=f"next-{n}")).granted for n in ("n0", "n1", "n2", "n3")
    ]

    # Then still 2 of the 4 nodes that serve go at once, not 3 (50% of 6)
    assert granted.count(True) == 2
