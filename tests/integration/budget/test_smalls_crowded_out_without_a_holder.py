"""The budget ConfigMap crowded out by keys the budget does not write, when no holder's lead is told in its clock
note to be left out of it: the store's first BudgetCrowdedOut check (the document and the others' keys past 1 MiB,
the document alone within it) is the one that refuses, before any write is sent. Wherever a holder's lead is told,
the second check (a holder's lead left out of the note for the others' keys) refuses first, so the first one was
tested by nothing; without it this write goes to the API server and comes back 422 Too long, told as the document
too large (a transient error retried until its message is dead-lettered).

A holder's lead is not told when the note is gone: a ConfigMap put back by hand from a copy of its document and
someone's keys (a backup), or a document an earlier version wrote. (No holder at all: a release only shrinks the
document, and an ask with none in it is granted, a holder.)"""

from __future__ import annotations

from kubernetes import client

from nodecycle.adapters.kube.budget import CLOCK_KEY, BudgetCrowdedOut
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE, admin_api, node_name
from tests.integration.budget.test_configmap_recreated import budget_of, request
from tests.support.budget_refusals import (
    BACKUP,
    CONFIGMAP,
    held_by_node_0,
    refusals_later,
    room_beside_the_budget,
)


def test_a_budget_whose_holders_lead_is_not_told_crowded_out_of_its_configmap_is_refused_before_any_write(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given a budget of 1 held by node 0's drain
    clock = held_by_node_0(server, core)
    # When someone puts the ConfigMap back by hand without its clock note (node 0's lead no longer told), with a
    # backup beside the document that fills its data to 150 bytes short of 1 MiB (less than a place in line takes)
    admin = admin_api(server)
    admin.patch_namespaced_config_map(CONFIGMAP, NAMESPACE, {"data": {CLOCK_KEY: None}})
    backup = room_beside_the_budget(admin, short_of_a_mib=150)
    admin.patch_namespaced_config_map(CONFIGMAP, NAMESPACE, {"data": {BACKUP: "x" * backup}})
    admin.api_client.close()
    # ...and node 1 asks (its place in line would grow the document)
    [refused] = refusals_later(
        server, clock, lambda: budget_of(core, clock, "blue", "1", "1").acquire(request(1))
    )

    # Then it is refused naming the key that takes the room, and no write was sent to be refused
    assert isinstance(refused, BudgetCrowdedOut), refused
    assert f"({BACKUP}: {backup} bytes)" in str(refused)
    assert ("update", "configmaps") not in server.counters()
    snapshot = budget_of(core, clock, "blue", "1", "1").snapshot()
    assert ([h.node for h in snapshot.holders], snapshot.waiters) == ([node_name(0)], [])
