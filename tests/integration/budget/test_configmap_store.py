"""The budget's Kubernetes adapters over real HTTPS against the sandbox API server: the ConfigMap written
with resourceVersion preconditions, 409s on racing writes, the shipped ConfigMap never created, and the node
list; all as the drain function's RBAC allows."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from nodecycle.adapters.kube.budget import (
    DATA_KEY,
    BudgetNotInstalled,
    ConfigMapBudgetStore,
    KubeNodeInventory,
)
from nodecycle.domain.budget import BudgetDocument, BudgetLimits, NodeState
from nodecycle.domain.budget.document import Released
from nodecycle.domain.budget.limits import owner_limits
from nodecycle.domain.errors import TransientError
from nodecycle.domain.policy import Quantity
from nodecycle.domain.ports.cluster import Refused
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE, add_nodes, admin_api, core_api, node_name

NO_SLEEP: dict[str, Any] = {"sleep": lambda seconds: None}


def with_entry(doc: BudgetDocument | None, node: str) -> BudgetDocument:
    """A document change that is easy to see: one more entry in ``released``."""
    base = doc or BudgetDocument()
    entry = Released(node=node, owner="test", released_at=datetime(2025, 1, 1, tzinfo=UTC), ttl_seconds=60)
    return base.model_copy(update={"released": (*base.released, entry)})


def written(store: ConfigMapBudgetStore) -> list[str]:
    doc = store.read()
    return [] if doc is None else [r.node for r in doc.released]


def test_the_shipped_config_map_is_an_empty_budget_that_keeps_its_labels(core: client.CoreV1Api) -> None:
    # Given the empty ConfigMap deploy/rbac.yaml ships
    store = ConfigMapBudgetStore(lambda: core, NAMESPACE)
    # never written: seeded at its first write; told with the ConfigMap's creation (the marks it can hold since), on
    # the reader's clock (the same as the API server's here, its Date to the second: up to a second later)
    metadata = core.read_namespaced_config_map("nodecycle-budget", NAMESPACE).metadata
    created = None if metadata is None else metadata.creation_timestamp
    assert created is not None
    read = store.read()
    assert read is not None
    assert read.created_at is not None
    assert created <= read.created_at < created + timedelta(seconds=2)
    assert read == BudgetDocument(unwritten=True, created_at=read.created_at)

    # When the drain function writes the budget into it
    store.update(lambda doc: (with_entry(doc, "n1"), None))

    # Then the document is there and the manifest's labels stayed
    config_map = core.read_namespaced_config_map("nodecycle-budget", NAMESPACE)
    assert config_map.metadata is not None
    assert config_map.data is not None
    assert config_map.metadata.labels == {
        "app.kubernetes.io/name": "nodecycle",
        "app.kubernetes.io/managed-by": "nodecycle",
    }
    assert BudgetDocument.from_json(config_map.data[DATA_KEY]).released[0].node == "n1"


def test_a_missing_config_map_is_an_error_that_names_it_and_the_fix(
    core: client.CoreV1Api, server: KubeServer
) -> None:
    # Given a cluster where the budget ConfigMap was deleted (or never applied)
    admin_api(server).delete_namespaced_config_map("nodecycle-budget", NAMESPACE)
    store = ConfigMapBudgetStore(lambda: core, NAMESPACE)
    assert store.read() is None

    # When a drain tries to take a slot, Then it fails with what is missing and how to fix it, creating nothing
    with pytest.raises(BudgetNotInstalled) as raised:
        store.update(lambda doc: (with_entry(doc, "n1"), None))
    assert "ConfigMap nodecycle/nodecycle-budget does not exist" in str(raised.value)
    assert "nodecycle rbac --namespace nodecycle --group-prefix GROUP | kubectl apply -f -" in str(
        raised.value
    )
    assert ("create", "configmaps") not in server.counters()


def test_a_config_map_deleted_between_read_and_write_is_read_again_and_reported_missing(
    core: client.CoreV1Api, server: KubeServer
) -> None:
    # Given a writer whose ConfigMap is deleted while it decides
    store = ConfigMapBudgetStore(lambda: core, NAMESPACE, **NO_SLEEP)
    seen: list[BudgetDocument | None] = []

    def mutate(doc: BudgetDocument | None) -> tuple[BudgetDocument, None]:
        seen.append(doc)
        if len(seen) == 1:
            admin_api(server).delete_namespaced_config_map("nodecycle-budget", NAMESPACE)
        return with_entry(doc, "n1"), None

    # When it writes, Then the 404 makes it read again, and what it finds is no budget at all
    with pytest.raises(BudgetNotInstalled):
        store.update(mutate)
    assert [None if d is None else d.model_copy(update={"created_at": None}) for d in seen] == [
        BudgetDocument(unwritten=True),
        None,
    ]


def test_a_replace_with_a_stale_resource_version_is_retried_on_the_new_document(
    core: client.CoreV1Api, server: KubeServer
) -> None:
    first, second = (ConfigMapBudgetStore(lambda: core, NAMESPACE, **NO_SLEEP) for _ in range(2))
    first.update(lambda doc: (with_entry(doc, "n0"), None))
    attempts = 0

    def mutate(doc: BudgetDocument | None) -> tuple[BudgetDocument, None]:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            second.update(lambda d: (with_entry(d, "n1"), None))
        return with_entry(doc, "n2"), None

    first.update(mutate)

    assert attempts == 2
    assert written(first) == ["n0", "n1", "n2"]


def test_conflicts_that_do_not_let_up_are_a_transient_error(core: client.CoreV1Api) -> None:
    store = ConfigMapBudgetStore(lambda: core, NAMESPACE, max_attempts=3, **NO_SLEEP)
    rival = ConfigMapBudgetStore(lambda: core, NAMESPACE)

    def always_overtaken(doc: BudgetDocument | None) -> tuple[BudgetDocument, None]:
        rival.update(lambda d: (with_entry(d, "rival"), None))
        return with_entry(doc, "never"), None

    with pytest.raises(TransientError, match="3 conflicting writes"):
        store.update(always_overtaken)
    assert "never" not in written(store)


def test_a_mutation_that_changes_nothing_writes_nothing(core: client.CoreV1Api, server: KubeServer) -> None:
    store = ConfigMapBudgetStore(lambda: core, NAMESPACE)
    store.update(lambda doc: (with_entry(doc, "n1"), None))
    server.reset_counters()

    assert store.update(lambda doc: (doc, "unchanged")) == "unchanged"
    assert ("update", "configmaps") not in server.counters()


def test_what_others_added_to_the_config_map_survives_a_write(
    core: client.CoreV1Api, server: KubeServer
) -> None:
    # Given a budget ConfigMap that an operator labelled and annotated, with a key of its own
    admin_api(server).replace_namespaced_config_map(
        "nodecycle-budget",
        NAMESPACE,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(
                name="nodecycle-budget", labels={"team": "platform"}, annotations={"note": "keep"}
            ),
            data={"README": "managed by nodecycle"},
        ),
    )
    store = ConfigMapBudgetStore(lambda: core, NAMESPACE)

    # When nodecycle reads it (an empty budget) and writes its document
    read = store.read()  # never written: seeded at its first write
    assert read is not None
    assert read.model_copy(update={"created_at": None}) == BudgetDocument(unwritten=True)
    store.update(lambda doc: (with_entry(doc, "n1"), None))

    # Then the label, the annotation and the other key are still there
    config_map = core.read_namespaced_config_map("nodecycle-budget", NAMESPACE)
    assert config_map.metadata is not None
    assert config_map.data is not None
    assert config_map.metadata.labels == {"team": "platform"}
    assert config_map.metadata.annotations == {"note": "keep"}
    assert config_map.data["README"] == "managed by nodecycle"


def test_a_budget_namespace_the_rbac_does_not_cover_is_refused_not_transient(
    core: client.CoreV1Api,
) -> None:
    # BudgetNamespace set to another namespace than the one deploy/rbac.yaml was rendered for: the 403 is the
    # domain's Refused (a drain that may not renew its slot settles at its timeout), in the API server's words
    store = ConfigMapBudgetStore(lambda: core, "platform")
    with pytest.raises(Refused) as raised:
        store.update(lambda doc: (with_entry(doc, "n1"), None))
    message = str(raised.value)
    assert message == (
        'configmaps "nodecycle-budget" is forbidden: User "arn:aws:sts::123456789012:assumed-role/'
        'nodecycle-DrainFunctionRole/nodecycle-DrainFunction" cannot get resource "configmaps" in API group "" '
        'in the namespace "platform"'
    )


def test_a_write_rbac_refuses_for_a_while_is_refused_and_writes_nothing(
    core: client.CoreV1Api, server: KubeServer
) -> None:
    # Given the budget ConfigMap's replace refused by RBAC once (a ClusterRoleBinding edited and restored)
    store = ConfigMapBudgetStore(lambda: core, NAMESPACE)
    server.faults.arm([Fault("rbac", "kube-forbidden", target="PUT configmaps", limit=1)], seed=1)

    # When a slot is written, Then the write is refused in the authorizer's words and nothing is written
    with pytest.raises(Refused, match='cannot update resource "configmaps"'):
        store.update(lambda doc: (with_entry(doc, "n1"), None))
    assert written(store) == []
    # and once RBAC is back, the same write goes through
    store.update(lambda doc: (with_entry(doc, "n1"), None))
    assert written(store) == ["n1"]


def test_an_unreachable_api_server_is_a_transient_error(server: KubeServer, core: client.CoreV1Api) -> None:
    core.api_client.configuration.retries = 0
    server.stop()
    with pytest.raises(TransientError):
        ConfigMapBudgetStore(lambda: core, NAMESPACE).read()


@pytest.mark.parametrize("status", [429, 500, 503])
def test_throttling_and_server_errors_are_transient(status: int) -> None:
    class Throttled:
        def read_namespaced_config_map_with_http_info(self, *args: object, **kwargs: object) -> None:
            raise ApiException(status=status, reason="busy")

    with pytest.raises(TransientError, match=str(status)):
        ConfigMapBudgetStore(Throttled, NAMESPACE).read()


def test_the_inventory_reads_the_state_of_the_nodes_of_its_selector_from_the_watch_cache(
    core: client.CoreV1Api, server: KubeServer
) -> None:
    # Given 5 nodes of our group (one cordoned, one NotReady) and 2 of another group
    ours = [node_name(i) for i in range(5)]
    for i, name in enumerate(ours):
        server.add_node(name, instance_id=f"i-{i}", zone="eu-west-1a", ready=i != 3, labels={"ng": "blue"})
    for i in (10, 11):
        server.add_node(node_name(i), instance_id=f"i-{i}", zone="eu-west-1b", labels={"ng": "green"})
    cordon = core_api(server)
    cordon.patch_node(ours[1], {"spec": {"unschedulable": True}})
    cordon.api_client.close()
    inventory = KubeNodeInventory(lambda: core, "ng=blue", with_status=True)

    # When it lists the nodes in scope
    nodes = {n.name: n for n in inventory.nodes_in_scope()}

    # Then it sees exactly our 5, with their zone and state, in one read from the watch cache
    assert sorted(nodes) == sorted(ours)
    assert nodes[ours[1]] == NodeState(name=ours[1], zone="eu-west-1a", schedulable=False, ready=True)
    assert [name for name, n in nodes.items() if not n.ready] == [ours[3]]
    assert server.counters()[("list", "nodes")] == 1


def test_the_node_of_a_stopped_instance_is_neither_unavailable_nor_in_scope(
    core: client.CoreV1Api, server: KubeServer
) -> None:
    # Given 3 nodes of our group: one in service, one NotReady, and the NotReady node of an instance stopped
    # into a warm pool, which the cloud provider taints and keeps
    ours = [node_name(i) for i in range(3)]
    for i, name in enumerate(ours):
        server.add_node(name, instance_id=f"i-{i}", zone="eu-west-1a", ready=i == 0, labels={"ng": "blue"})
    taint = core_api(server)
    taint.patch_node(
        ours[2],
        {"spec": {"taints": [{"key": "node.cloudprovider.kubernetes.io/shutdown", "effect": "NoSchedule"}]}},
    )
    taint.api_client.close()
    inventory = KubeNodeInventory(lambda: core, "ng=blue", with_status=True)

    # When an owner counting unavailable nodes, with a percent limit, records its limits from the list
    limits = BudgetLimits(Quantity.parse("100%"))
    entry = owner_limits(
        limits, count_unavailable=True, nodes=inventory.nodes_in_scope(), now=datetime.now(UTC)
    )

    # Then only the node lost to a disruption is unavailable, and the percent is of the other 2 nodes
    assert [n.name for n in entry.unavailable] == [ours[1]]
    assert (entry.nodes_in_scope, entry.resolved.total) == (2, 2)


def test_for_counts_alone_the_inventory_reads_the_nodes_metadata_only(
    core: client.CoreV1Api, server: KubeServer
) -> None:
    # Given 5 nodes of our group and 2 of another
    for i in range(5):
        server.add_node(
            node_name(i),
            instance_id=f"i-{i}",
            zone=("eu-west-1a", "eu-west-1b")[i % 2],
            labels={"ng": "blue"},
        )
    for i in (10, 11):
        server.add_node(node_name(i), instance_id=f"i-{i}", zone="eu-west-1b", labels={"ng": "green"})
    whole = KubeNodeInventory(lambda: core, "ng=blue", with_status=True)
    counts = KubeNodeInventory(lambda: core, "ng=blue", with_status=False)

    # When one lists whole nodes and the other, which only counts, lists them
    whole.nodes_in_scope()
    whole_bytes = server.bytes_sent()[("list", "nodes")]
    server.reset_counters()
    found = counts.nodes_in_scope()

    # Then the counting one sees the same nodes and zones, for a fraction of the bytes
    assert sorted((n.name, n.zone) for n in found) == sorted((n.name, n.zone) for n in whole.nodes_in_scope())
    assert server.bytes_sent()[("list", "nodes")] < whole_bytes / 2


def test_a_list_the_server_pages_is_continued_without_naming_a_version_again() -> None:
    # Given a server that honours the limit even from its watch cache (newer API servers do)
    asked: list[dict[str, object]] = []

    class Paging:
        def list_node(self, **query: object) -> object:
            asked.append(query)
            more = {"continue": f"token-{len(asked)}"} if len(asked) < 3 else {}
            page = {"items": [{"metadata": {"name": f"n{len(asked)}", "labels": {}}}], "metadata": more}
            return type("Response", (), {"data": json.dumps(page).encode()})()

    # When the inventory lists the nodes
    nodes = KubeNodeInventory(Paging, "", with_status=False).nodes_in_scope()

    # Then it follows the pages, naming resourceVersion=0 on the first only (a continued page has its own)
    assert [n.name for n in nodes] == ["n1", "n2", "n3"]
    assert [(q["resource_version"], q["_continue"]) for q in asked] == [
        ("0", None),
        (None, "token-1"),
        (None, "token-2"),
    ]


def test_the_inventory_lists_nodes_at_most_once_per_cache_ttl(
    core: client.CoreV1Api, server: KubeServer
) -> None:
    add_nodes(server, 3)
    clock = [0.0]
    inventory = KubeNodeInventory(lambda: core, "", timedelta(seconds=10), wall_clock=lambda: clock[0])

    inventory.nodes_in_scope()
    clock[0] = 9.9
    inventory.nodes_in_scope()
    assert server.counters()[("list", "nodes")] == 1

    clock[0] = 10.0
    assert len(inventory.nodes_in_scope()) == 3
    assert server.counters()[("list", "nodes")] == 2


def test_a_budget_namespace_works_once_the_rbac_is_rendered_for_it(server: KubeServer) -> None:
    # Given the cluster side rendered for BudgetNamespace=platform (nodecycle rbac --namespace platform)
    from nodecycle_cli.rbac import render

    server.apply(render("platform"))
    store = ConfigMapBudgetStore(lambda: core_api(server), "platform")

    # When the drain function writes the budget there, Then its RBAC allows it on the shipped ConfigMap
    store.update(lambda doc: (with_entry(doc, "n1"), None))
    assert written(store) == ["n1"]
